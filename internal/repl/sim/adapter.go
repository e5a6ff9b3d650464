package sim

import (
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
)

// The adapter: the only file that knows the protocol core. node plays
// dyad's driver around one repl.Node: it persists each Ready's hard state
// at once and its entries on the fake disk (reporting Persisted when a
// sync completes, in groups), sends its messages, applies committed
// entries to a small key-value store and answers clients, serves
// catch-up and snapshot requests from its disk, keeps conflict records and
// logs merges. Persisting and applying are separate, as in the engine's
// next shape: only committed entries are applied.

// meta is the durable hard state: the epoch history, the meta term and
// the newest term followed.
type meta struct {
	epochs   []repl.EpochRecord
	term     uint64
	followed uint64
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
	ready       []released
	snaps       map[uint64]snapshot // snapshots this node served, by request ID
	forwarded   seenWrites
	writeAt     func(uint64) (uint64, bool)
}

func newNode(w *World, idx int, ppm int64) *node {
	n := &node{w: w, idx: idx, id: uint64(idx + 1), clock: Clock{PPM: ppm}, snaps: map[uint64]snapshot{}}
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
		Run: w.rng.Uint64() | 1, ReqSeed: w.rng.Uint64() >> 1,
	}
	n.gen++
	n.frozenUntil, n.deferred, n.syncing = 0, nil, false
	n.puts, n.reads, n.ready = map[uint64]*Op{}, map[uint64]*Op{}, nil
	n.forwarded = seenWrites{}
	n.rebuild()
	n.n = repl.NewNode(cfg, n.restartState())
	w.check.Visible(n.idx, n.rev)
	w.tracef("node %d starts (last %d, applied %d, rev %d)", n.idx, n.disk.Len(), n.applied, n.rev)
	n.process()
	n.scheduleTick(0)
}

// rebuild recomputes the store from the durable log up to Applied.
func (n *node) rebuild() {
	n.kv, n.rev, n.applied = map[string]kvAt{}, 0, 0
	for _, e := range n.disk.Log()[:n.disk.Applied] {
		n.applyKV(e)
	}
	n.applied = n.disk.Applied
}

func (n *node) restartState() repl.RestartState {
	m := n.disk.Meta
	st := repl.RestartState{Epochs: append([]repl.EpochRecord(nil), m.epochs...), MaxTerm: m.term, Followed: m.followed, Now: n.now(), Applied: n.applied, Rev: n.rev}
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
	n.puts, n.reads, n.ready, n.deferred = nil, nil, nil, nil
	n.w.tracef("node %d stops (leave %v), disk keeps %d entries", n.idx, leave, n.disk.Len())
}

func (n *node) scheduleTick(local int64) {
	gen := n.gen
	n.w.q.After(n.clock.Virtual(local), func() {
		if n.gen == gen && n.up() {
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
	n.n.Tick(n.now())
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

// process carries out every Ready of the core, as the driver does. It
// reports whether any did more than send heartbeats.
func (n *node) process() bool {
	busy := false
	for n.n != nil && n.n.HasReady() {
		rd := n.n.Ready()
		n.n.Advance()
		if n.carryOut(&rd) {
			busy = true
		}
	}
	return busy
}

func (n *node) carryOut(rd *repl.Ready) bool {
	w := n.w
	busy := !rd.HardState.IsEmpty() || len(rd.Entries) > 0 || len(rd.CommittedEntries) > 0 || len(rd.ReadStates) > 0 ||
		rd.RoleChange != nil || len(rd.Serve) > 0 || len(rd.Snapshot) > 0 || rd.SplitBrain != nil || rd.Merge != 0 || rd.Stuck != nil || rd.Fence
	if rd.Truncate != 0 {
		busy = true
		n.truncate(rd.Truncate)
	}
	n.persist(rd)
	for _, m := range rd.Messages {
		busy = busy || m.Kind != repl.KindHeartbeat
		for to := range w.nodes {
			if to != n.idx && (m.To == 0 || m.To == uint64(to+1)) {
				w.net.Send(Packet{From: n.idx, To: to, Payload: m})
			}
		}
	}
	if len(rd.CommittedEntries) > 0 {
		// After a restart the core hands out only entries it took in this
		// run: the ones on disk between Applied and the first of them are
		// replayed from the log (the WAL replay after consistent_index).
		for i := n.applied + 1; i < rd.CommittedEntries[0].Index; i++ {
			if e, ok := n.disk.At(i); ok {
				n.apply(e)
			}
		}
	}
	for _, e := range rd.CommittedEntries {
		n.apply(e)
	}
	if len(rd.CommittedEntries) > 0 {
		n.n.Applied(n.applied)
	}
	for _, r := range rd.ReadStates {
		op := n.reads[r.ID]
		delete(n.reads, r.ID)
		if op == nil {
			continue
		}
		if r.Refused {
			w.finish(op, Output{}, true)
			continue
		}
		n.ready = append(n.ready, released{op: op, index: r.Index})
	}
	n.serveReads()
	if rc := rd.RoleChange; rc != nil {
		w.tracef("node %d: %s -> %s: %s (epoch %s)", n.idx, rc.From, rc.To, rc.Reason, rc.Epoch)
		if rc.SteppedDown || rc.LeftReplica {
			for _, id := range sortedKeys(n.puts) {
				w.finish(n.puts[id], Output{Unknown: true}, true) // "request timed out"
				delete(n.puts, id)
			}
		}
	}
	if rd.Stuck != nil {
		w.tracef("node %d stuck: %q", n.idx, *rd.Stuck)
	}
	w.stats.SplitBrains += rd.Counters.SplitBrains
	if rd.Fence {
		gen := n.gen
		w.q.After(int64(w.cfg.Lease/2), func() {
			if n.gen == gen {
				n.later(func() { n.n.Fenced(nil); n.process() })
			}
		})
	}
	for _, s := range rd.Serve {
		n.serve(s)
	}
	for _, c := range rd.Snapshot {
		if c.Last {
			n.install(c)
		}
	}
	if sb := rd.SplitBrain; sb != nil {
		for _, e := range n.disk.Log()[min(sb.DivergedAt, uint64(n.disk.Len())):] {
			if e.ReqID != 0 {
				w.check.Conflict(n.idx, e.ReqID)
			}
		}
		w.tracef("node %d keeps its writes after index %d as conflict records", n.idx, sb.DivergedAt)
		n.n.ConflictsKept(false, nil)
	}
	if rd.Merge != 0 {
		target := max(rd.Merge, n.lastRev()) + 1
		w.tracef("node %d merges above revision %d", n.idx, target-1)
		_ = n.n.Propose([]repl.Entry{{Merge: true, Data: repl.MergeData(target), Rev: target, Time: n.now()}})
	}
	return busy
}

// truncate drops the log after index keep in place (Ready.Truncate), with
// the epoch records that start after it, as one durable step, and reports
// the outcome. Nothing above keep was applied (only committed entries
// are, and the core asks only for a suffix it never committed), so the
// store is rebuilt only if that ever fails to hold, and the checker then
// sees the revision go back.
func (n *node) truncate(keep uint64) {
	m := &n.disk.Meta
	if keep > uint64(n.disk.Len()) {
		n.n.Truncated(repl.RestartState{}, fmt.Errorf("truncate after %d: the log ends at %d", keep, n.disk.Len()))
		return
	}
	n.disk.TruncateAfter(int(keep))
	eps := m.epochs[:0:0]
	for _, r := range m.epochs {
		if r.Start <= keep {
			eps = append(eps, r)
		}
	}
	m.epochs = eps
	if n.applied > n.disk.Applied {
		n.rebuild()
		n.w.check.Visible(n.idx, n.rev)
	}
	n.w.tracef("node %d dropped its log after %d in place", n.idx, keep)
	n.n.Truncated(n.restartState(), nil)
}

// persist writes the hard state at once and appends the entries; a sync
// reports them Persisted later.
func (n *node) persist(rd *repl.Ready) {
	hs := &rd.HardState
	m := &n.disk.Meta
	if hs.Term != 0 {
		m.term = max(m.term, hs.Term)
	}
	m.followed = max(m.followed, hs.Followed)
	if len(hs.Drop) > 0 || len(hs.Put) > 0 {
		eps := make([]repl.EpochRecord, 0, len(m.epochs)+len(hs.Put))
		for _, r := range m.epochs {
			if !containsEpoch(hs.Drop, r.Epoch) {
				eps = append(eps, r)
			}
		}
		eps = append(eps, hs.Put...)
		sort.SliceStable(eps, func(i, j int) bool { return eps[i].Epoch.Less(eps[j].Epoch) })
		m.epochs = eps
	}
	for _, e := range rd.Entries {
		if e.Index != uint64(n.disk.Len())+1 {
			n.w.check.Fail("driver", "node %d was asked to write entry %d after %d", n.idx, e.Index, n.disk.Len())
			return
		}
		n.disk.Append(e)
	}
	if len(rd.Entries) > 0 && !n.syncing {
		n.sync()
	}
}

func containsEpoch(rs []repl.EpochRecord, e repl.Epoch) bool {
	for _, r := range rs {
		if r.Epoch == e {
			return true
		}
	}
	return false
}

// sync starts a sync of everything written so far (group commit).
func (n *node) sync() {
	w := n.w
	n.syncing = true
	upto, gen := n.disk.Len(), n.gen
	d := int64(w.cfg.FsyncMin) + w.rng.Int64N(int64(w.cfg.FsyncMax-w.cfg.FsyncMin)+1)
	w.q.After(d, func() {
		if n.gen != gen {
			return
		}
		n.disk.SyncTo(upto)
		n.later(func() {
			n.syncing = false
			if e, ok := n.disk.At(uint64(n.disk.Synced())); ok {
				n.n.Persisted(e.Index, e.Rev)
			}
			n.process()
			if n.disk.Len() > n.disk.Synced() && !n.syncing {
				n.sync()
			}
		})
		w.step()
	})
}

// apply applies a committed entry to the store and answers its client if
// this node took it.
func (n *node) apply(e repl.Entry) {
	w := n.w
	if e.Index <= n.applied {
		return
	}
	if e.Index != n.applied+1 {
		w.check.Fail("driver", "node %d asked to apply entry %d after %d", n.idx, e.Index, n.applied)
		return
	}
	if !e.Merge && e.Rev != n.rev+1 {
		w.check.Fail("revision-gap", "node %d applies entry %d at revision %d after revision %d", n.idx, e.Index, e.Rev, n.rev)
	}
	key := n.applyKV(e)
	n.applied, n.disk.Applied = e.Index, e.Index
	id := e.ReqID
	if e.Merge {
		id = mergeID | uint64(n.rev)
	}
	w.check.Applied(n.idx, e.Index, id, n.rev, EpochID{Term: e.Epoch.Term, Node: e.Epoch.Node}, e.Solo)
	if e.Origin == n.id {
		if op := n.puts[e.ReqID]; op != nil {
			delete(n.puts, e.ReqID)
			if w.finish(op, Output{Rev: e.Rev}, false) {
				w.check.Ack(n.idx, e.ReqID, e.Index, key, e.Rev, EpochID{Term: e.Epoch.Term, Node: e.Epoch.Node}, e.Solo)
			}
		}
	}
}

// applyKV changes the store; it returns the key written ("" for a merge).
func (n *node) applyKV(e repl.Entry) string {
	if e.Merge {
		if rev, err := e.MergeRev(); err == nil && rev > n.rev {
			n.rev = rev
		}
		return ""
	}
	key, value, _ := strings.Cut(string(e.Data), "\x00")
	n.kv[key] = kvAt{value: value, modRev: e.Rev}
	n.rev = e.Rev
	return key
}

// serveReads answers released reads whose index is applied.
func (n *node) serveReads() {
	k := 0
	for _, r := range n.ready {
		if r.index > n.applied {
			n.ready[k] = r
			k++
			continue
		}
		kv, ok := n.kv[r.op.in.Key]
		r.op.leads = n.n.Role().Leads()
		n.w.finish(r.op, Output{Rev: n.rev, Found: ok, Value: kv.value, ModRev: kv.modRev}, false)
	}
	n.ready = n.ready[:k]
}

// serve answers a catch-up or snapshot request from the disk.
func (n *node) serve(s repl.ServeRequest) {
	to := int(s.To) - 1
	if to < 0 || to >= len(n.w.nodes) || to == n.idx {
		return
	}
	if s.Snapshot {
		n.snaps[s.ID] = snapshot{
			log:     append([]repl.Entry(nil), n.disk.Log()[:n.applied]...),
			meta:    meta{epochs: append([]repl.EpochRecord(nil), n.disk.Meta.epochs...), term: n.disk.Meta.term},
			applied: n.applied,
		}
		chunk := binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(n.idx)), s.ID)
		n.w.net.Send(Packet{From: n.idx, To: to, Payload: repl.Message{Kind: repl.KindSnapChunk, From: n.id, To: s.To, Term: s.ID, Flags: repl.FlagLast, Chunk: chunk}})
		return
	}
	c := s.Catchup
	log := n.disk.Log()
	last := uint64(len(log))
	m := repl.Message{Kind: repl.KindCatchup, From: n.id, To: s.To, Term: s.ID, Index: c.From}
	switch {
	case c.From > 1 && (c.From-1 > last || log[c.From-2].Epoch != c.Prev):
		m.Flags, m.Epochs = repl.FlagDiverged, append([]repl.EpochRecord(nil), n.disk.Meta.epochs...)
	case c.From >= 1 && c.From <= last:
		m.Entries = append([]repl.Entry(nil), log[c.From-1:min(last, c.From-1+64)]...)
	}
	n.w.net.Send(Packet{From: n.idx, To: to, Payload: m})
}

// install installs the snapshot whose last chunk is c.
func (n *node) install(c repl.SnapshotChunk) {
	if len(c.Data) != 16 {
		n.n.Installed(repl.RestartState{}, repl.ErrStaleSnapshot)
		return
	}
	from, id := binary.BigEndian.Uint64(c.Data), binary.BigEndian.Uint64(c.Data[8:])
	var snap snapshot
	ok := false
	if from < uint64(len(n.w.nodes)) {
		snap, ok = n.w.nodes[from].snaps[id]
	}
	if !ok || snap.applied < c.Floor {
		n.n.Installed(repl.RestartState{}, repl.ErrStaleSnapshot)
		return
	}
	snap.meta.term = max(snap.meta.term, n.disk.Meta.term)
	snap.meta.followed = max(snap.meta.followed, n.disk.Meta.followed)
	n.disk.Replace(snap.log, snap.meta, snap.applied)
	n.gen++
	n.syncing = false
	n.rebuild()
	n.n.Installed(n.restartState(), nil)
	n.w.check.Visible(n.idx, n.rev)
	n.w.tracef("node %d installs a snapshot up to index %d (rev %d)", n.idx, n.applied, n.rev)
	n.scheduleTick(int64(n.w.cfg.Lease / 8))
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
