package sim

import (
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
)

// The adapter (adapter*.go, the only files that know the protocol
// core). node plays
// dyad's driver around one repl.Node: it persists each Ready's hard state
// at once and its entries on the fake disk (reporting Persisted when a
// sync completes, in groups), sends its messages, applies committed
// entries to a small key-value store and answers clients, serves
// catch-up and snapshot requests from its disk, keeps conflict records and
// logs merges. Persisting and applying are separate, as in the engine's
// next shape: only committed entries are applied. This file holds the
// node's life (boot, stop, ticks, packets, client requests) and what the
// checker sees of it; adapter_ready.go carries out Ready; adapter_disk.go
// is the durable side.

// meta is the durable hard state: the epoch history, the meta term and
// the newest term followed.
type meta struct {
	epochs   []repl.EpochRecord
	term     uint64
	followed uint64
	// commit is the lower bound of the commit index kept on disk, as the
	// server keeps it in its data file: written with each batch of
	// entries (the commit index of the Ready that carries them), so stale
	// by whatever the node learnt since; lowered by a truncation; a
	// snapshot carries its leader's (RestartState.Commit). 0: none.
	commit uint64
}

// snapshot is a data file a leader served: its log up to applied, and
// its hard state.
type snapshot struct {
	log     []repl.Entry
	meta    meta
	applied uint64
}

type node struct {
	w     *World
	idx   int
	id    uint64
	clock Clock
	disk  Disk[repl.Entry, meta]
	n     *repl.Node // nil: down
	// gen changes on every crash, restart and snapshot install: events
	// scheduled for an older generation are void.
	gen         uint64
	frozenUntil int64
	deferred    []func()
	syncing     bool
	kv          map[string]kvAt
	rev         int64
	applied     uint64
	puts        map[uint64]*Op // writes this node took from clients, by write ID
	reads       map[uint64]*Op // reads registered with ReadIndex, by op ID
	grant       repl.ReadGrant // as the server's driver publishes it (grant.go)
	ready       []released
	snaps       map[uint64]snapshot // snapshots this node served, by request ID
	forwarded   seenWrites
	writeAt     func(uint64) (uint64, bool)
	// fence is how the node's fence command turns out now; fenceOK is
	// true while the core takes a success (a promotion must come then).
	fence   fence
	fenceOK bool
	// finalHandover: the node's storage failed and it hands over; it
	// stops once it no longer leads.
	finalHandover bool
	// old: the node's next run is of an older build, which speaks
	// protocol versions up to Script.OldMax only (Script.Old, FaultBuild);
	// oldRun: this run is (adapter_versions.go).
	old, oldRun bool
	// flushing: the node's loop waits for the flush of its own batch
	// (flush) before it proposes and sends it, as a leader whose pair
	// speaks below ProtocolV3 does; inputs wait (later).
	// flushDone: the flush ended while the node was frozen.
	flushing, flushDone bool
	flush               []repl.Entry
	// showTo: an older build's replica shows what it persists; the
	// newest entry it took from its leader, shown once synced.
	showTo uint64
}

func newNode(w *World, idx int, ppm int64) *node {
	n := &node{w: w, idx: idx, id: uint64(idx + 1), clock: Clock{PPM: ppm}, snaps: map[uint64]snapshot{}, fence: fence{d: quickFence}}
	n.writeAt = func(i uint64) (uint64, bool) {
		e, ok := n.disk.At(i)
		return e.ReqID, ok
	}
	return n
}

func (n *node) roleName() string {
	switch {
	case n.n == nil:
		return "down"
	case !n.up():
		return "frozen"
	}
	return n.n.Role().String()
}

// start starts the node's first run at virtual time 0.
func (n *node) start(_ bool) {
	n.old = n.idx < len(n.w.script.Old) && n.w.script.Old[n.idx]
	n.clock.Reset(n.w.q.Now(), 1+n.w.rng.Int64N(int64(time.Hour)))
	n.boot()
}

// restart starts a new run from the disk (reboot: the clock starts again
// near zero).
func (n *node) restart(reboot bool) {
	if n.n != nil {
		return
	}
	if reboot {
		n.clock.Reset(n.w.q.Now(), 1+n.w.rng.Int64N(int64(time.Second)))
	}
	n.boot()
}

func (n *node) boot() {
	w := n.w
	cfg := repl.Config{
		ID: n.id, Lease: w.cfg.Lease, Bootstrap: n.idx == 0, Preferred: n.idx == 0,
		Run: w.rng.Uint64() | 1, ReqSeed: w.rng.Uint64() >> 1, Fence: w.script.Fence,
	}
	n.gen++
	n.frozenUntil, n.deferred, n.syncing, n.finalHandover = 0, nil, false, false
	n.flushing, n.flushDone, n.flush, n.showTo = false, false, nil, 0
	n.oldRun = n.old
	if n.oldRun {
		cfg.Build = w.script.olderBuild()
	}
	n.puts, n.reads, n.ready, n.grant = map[uint64]*Op{}, map[uint64]*Op{}, nil, repl.ReadGrant{}
	n.forwarded = seenWrites{}
	n.rebuild(n.shownAtStart())
	n.n = repl.NewNode(cfg, n.restartState())
	w.check.Visible(n.idx, n.rev)
	w.tracef("node %d starts (last %d, applied %d, rev %d), %s", n.idx, n.disk.Len(), n.applied, n.rev, n.buildName())
	n.process()
	n.scheduleTick(0)
}

// rebuild recomputes the store (what the node shows) from the durable log
// up to upto (<= Applied).
func (n *node) rebuild(upto uint64) {
	n.kv, n.rev, n.applied = map[string]kvAt{}, 0, 0
	for _, e := range n.disk.Log()[:upto] {
		n.applyKV(e)
	}
	n.applied = upto
}

// shownAtStart is what a restarted node shows: every entry it applied.
// This driver applies only committed entries, so all of them were
// committed (and may have been shown) before it stopped; the commit
// bound it kept (meta.commit) may be below them, and the core must never
// drop one of them (the checker sees the revision go back).
func (n *node) shownAtStart() uint64 { return n.disk.Applied }

// restartState is the state on disk for the core: applied up to the
// disk's Applied, and the commit bound kept (possibly stale).
func (n *node) restartState() repl.RestartState {
	m := n.disk.Meta
	st := repl.RestartState{Epochs: append([]repl.EpochRecord(nil), m.epochs...), MaxTerm: m.term, Followed: m.followed, Now: n.now(), Applied: n.disk.Applied, Rev: n.revAt(n.disk.Applied), Commit: m.commit}
	if l := n.disk.Len(); l > 0 {
		e := n.disk.Log()[l-1]
		st.Last, st.LastEpoch, st.LastSolo = e.Index, e.Epoch, e.Solo
	}
	return st
}

// stop ends the run: a crash (the disk loses what was not synced), or a
// planned stop (leave: a replica tells its primary; everything is synced).
func (n *node) stop(leave bool) {
	if n.n == nil {
		return
	}
	if leave && n.up() {
		n.finishFlush() // a planned stop lets the batch being flushed go out first
		n.n.Leave()
		n.process()
		n.disk.SyncTo(n.disk.Len())
	}
	n.n = nil
	if !leave {
		n.w.check.Crashed(n.idx)
	}
	n.disk.Crash()
	n.gen++
	for _, id := range sortedKeys(n.puts) {
		n.w.finish(n.puts[id], Output{Unknown: true}, true)
	}
	for _, id := range sortedKeys(n.reads) {
		n.w.finish(n.reads[id], Output{}, true)
	}
	for _, r := range n.ready {
		n.w.finish(r.op, Output{}, true)
	}
	n.puts, n.reads, n.ready, n.deferred, n.grant = nil, nil, nil, nil, repl.ReadGrant{}
	n.w.tracef("node %d stops (leave %v), disk keeps %d entries", n.idx, leave, n.disk.Len())
}

func (n *node) scheduleTick(local int64) {
	gen := n.gen
	n.w.q.After(n.clock.Virtual(local), func() {
		switch {
		case n.gen != gen || !n.up():
		case n.flushing:
			n.deferred = append(n.deferred, n.tick) // the loop waits for the flush
		default:
			n.tick()
		}
	})
}

// tick gives the core the clock; a tick that did more than send a
// heartbeat counts as a step.
func (n *node) tick() {
	if n.n == nil {
		return
	}
	now := n.now()
	n.w.check.Clock(n.idx, n.clock.Resets, n.w.q.Now(), now)
	n.n.Tick(now)
	busy := n.process()
	n.scheduleTick(int64(n.w.cfg.Lease / 8))
	if busy {
		n.w.step()
	}
}

// receive takes a packet; it reports whether it was a step (delivered to
// a running node).
func (n *node) receive(p Packet) bool {
	if n.n == nil {
		return false
	}
	return n.later(func() { n.handle(p) })
}

func (n *node) handle(p Packet) {
	switch m := p.Payload.(type) {
	case repl.Message:
		m.Received = n.now()
		n.n.Step(m)
	case fwdWrite:
		if n.forwarded[[2]uint64{m.origin, m.id}] {
			break // a duplicate: the first copy was logged or refused
		}
		n.forwarded[[2]uint64{m.origin, m.id}] = true
		if err := n.propose(m.origin, m.id, m.key, m.value); err != nil {
			n.w.net.Send(Packet{From: n.idx, To: p.From, Payload: fwdRefused{id: m.id}})
		}
	case fwdRefused:
		if op := n.puts[m.id]; op != nil {
			delete(n.puts, m.id)
			n.w.finish(op, Output{}, true)
		}
	}
	n.process()
}

// submit takes a client operation (a down node refuses the connection).
func (n *node) submit(op *Op) {
	if n.n == nil {
		n.w.finish(op, Output{}, true)
		return
	}
	n.later(func() { n.take(op) })
}

func (n *node) take(op *Op) {
	st := n.n.Status()
	switch {
	case op.in.Put && st.Role.Leads():
		if err := n.propose(n.id, op.id, op.in.Key, op.in.Value); err != nil {
			n.w.finish(op, Output{}, true)
			return
		}
		n.puts[op.id] = op
	case op.in.Put && st.Role == repl.RoleReplica && st.Leader != 0:
		n.puts[op.id] = op
		n.w.net.Send(Packet{From: n.idx, To: int(st.Leader - 1), Payload: fwdWrite{origin: n.id, id: op.id, key: op.in.Key, value: op.in.Value}})
	case !op.in.Put && n.grant.Covers(n.now()):
		n.readUnderGrant(op) // as the server's request goroutine
	case !op.in.Put:
		// The core alone decides whether and when a read is served, as
		// in the server: it refuses a read it may not serve.
		n.reads[op.id] = op
		n.n.ReadIndex(op.id, n.now())
	default:
		n.w.finish(op, Output{}, true) // no leader
	}
	n.process()
}

// hasLeader is what the server reports as HasLeader: a solo leader
// always; a primary or a replica while it holds its peer's lease; a
// replica replacing its state from a snapshot never. The checker takes a
// primary without it for one that serves nothing (reads go through the
// core's ReadIndex, which applies its own rules).
func (n *node) hasLeader(st repl.Status) bool {
	switch st.Role {
	case repl.RoleSolo:
		return true
	case repl.RolePrimary, repl.RoleReplica:
		return n.now() < st.LeaseUntil && !(st.Role == repl.RoleReplica && st.Resyncing)
	}
	return false
}

// propose logs a write as the leader, at the revision after the log's last.
func (n *node) propose(origin, id uint64, key, value string) error {
	if !n.n.Role().Leads() {
		return repl.ErrNotLeader
	}
	e := repl.Entry{Origin: origin, ReqID: id, Time: n.now(), Rev: n.lastRev() + 1, Data: []byte(key + "\x00" + value)}
	if !n.n.SendsBeforeFlush() {
		return n.flushFirst(e)
	}
	if err := n.n.Propose([]repl.Entry{e}); err != nil {
		return err
	}
	n.process()
	return nil
}

func (n *node) lastRev() int64 {
	if l := n.disk.Len(); l > 0 {
		return n.disk.Log()[l-1].Rev
	}
	return 0
}

// synchronousWith reports whether n and o form a settled synchronous
// pair (one primary, one replica that is not catching up).
func (n *node) synchronousWith(o *node) bool {
	p, r := n, o
	if p.n.Role() != repl.RolePrimary {
		p, r = o, n
	}
	if p.n.Role() != repl.RolePrimary || r.n.Role() != repl.RoleReplica {
		return false
	}
	st := p.n.Status()
	return st.PeerFresh && !st.Peer.CatchingUp
}

// view fills v for the checker.
func (n *node) view(v *View) {
	v.Up, v.Gen, v.WriteAt = n.up(), n.gen, n.writeAt
	v.Role, v.Leads, v.Epoch = n.roleName(), false, EpochID{}
	if n.n != nil {
		st := n.n.Status()
		// A primary without its role lease serves nothing: its replica
		// may have taken over.
		v.Leads = st.Role.Leads() && n.hasLeader(st)
		v.Epoch = EpochID{Term: st.Epoch.Term, Node: st.Epoch.Node}
	}
}

// truth is what n's log says every put did (settle.go): the key and the
// revision of each value written. Merge entries write no value.
func (n *node) truth() Truth {
	t := Truth{}
	for _, e := range n.disk.Log() {
		if e.Merge {
			continue
		}
		key, value, _ := strings.Cut(string(e.Data), "\x00")
		if _, dup := t[value]; !dup {
			t[value] = Written{Key: key, Rev: e.Rev}
		}
	}
	return t
}

// revAt is the revision after log entry i (0: none).
func (n *node) revAt(i uint64) int64 {
	if e, ok := n.disk.At(i); ok {
		return e.Rev
	}
	return 0
}
