package repl

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
)

// The interaction harness: two nodes (a and b) over an in-memory network,
// driven by scenario scripts (interaction_test.go). It plays the driver:
// it persists and applies each Ready at once (reporting Persisted and
// Applied together, as today's server does), drops a suffix in place
// unless an entry of it has data starting with "!" (an effect the server
// cannot undo in place, such as a lease grant), answers catch-up and
// snapshot requests from the leader's in-memory log, runs the fence
// command, keeps conflict records and logs merges. Time is one clock
// shared by both nodes, moved only by the script.

const (
	hLease = time.Second
	hTick  = hLease / 8
)

// hnode is one node of the harness: its core and its "disk".
type hnode struct {
	name string
	id   uint64
	cfg  Config
	n    *Node // nil while crashed
	// opening: the core is made but the driver does not run it yet (it
	// neither ticks nor takes messages): a slow open of the data file.
	opening  bool
	runs     uint64
	log      []Entry // index i+1 at log[i]
	epochs   []EpochRecord
	term     uint64
	followed uint64
	// commit: the lower bound of the commit index kept on disk, as the
	// driver keeps it: written with each batch of entries (the commit
	// index of the Ready that carries them), so possibly stale; lowered
	// by a truncation (RestartState.Commit; 0: none, a data dir of an
	// older build).
	commit  uint64
	lastRun int64 // time of the node's last tick
	// frozenUntil: the node neither ticks nor takes messages before then.
	frozenUntil int64
	fenceErr    error
	fencePend   bool
	conflicts   int
	// accepted: the operator accepted this node's conflict records (resolve):
	// the same split brain's records, kept again, count as accepted, as
	// the server's conflict.Accepted finds the accepted file.
	accepted bool
	// snaps holds snapshots served by this node, by request ID.
	snaps map[uint64]*hnode
	// grant is the read grant published as the driver publishes it
	// (narrowed before a Ready's effects, widened after them).
	grant ReadGrant
	// holdSync: x's entries are written but not synced until the script
	// says sync (a slow own flush while its messages already went out);
	// unsynced holds them meanwhile, and a crash loses them.
	holdSync bool
	unsynced []Entry
	// flushing: a leader's batch that waits for its own flush before it
	// is proposed and sent (its pair speaks below ProtocolV3:
	// flushFirst); flushed the newest index so written, which the core
	// hands back in Entries and persist skips.
	flushing []Entry
	flushed  uint64
}

// hmsg is a message in flight.
type hmsg struct {
	from, to *hnode
	m        Message
}

type harness struct {
	now      int64
	nodes    []*hnode
	inflight []hmsg
	cut      map[[2]string]bool
	// drop: kinds of message lost on a link; held: messages kept back on
	// a link (they survive crashes) until released.
	drop     map[[2]string]map[uint16]bool
	held     map[[2]string][]hmsg
	holdKind map[[2]string]uint16 // 0: every kind
	out      *strings.Builder
	trace    bool
	// acked holds every entry a leader acknowledged (committed), by index;
	// commits the newest commit index seen per node run.
	acked   map[uint64]Entry
	ackedTo uint64 // acked holds every index up to here (that one leader acknowledged)
	commits map[*Node]uint64
	// ownCommit: the commit index a node run reached while not a replica.
	ownCommit map[*Node]uint64
	split     bool // both nodes led alone at once
	// violations found by check, printed by the command that caused them.
	violations []string
}

func newHarness() *harness {
	h := &harness{now: 1, cut: map[[2]string]bool{}, drop: map[[2]string]map[uint16]bool{}, held: map[[2]string][]hmsg{}, holdKind: map[[2]string]uint16{}, acked: map[uint64]Entry{}, commits: map[*Node]uint64{}, ownCommit: map[*Node]uint64{}, out: &strings.Builder{}}
	for i, name := range []string{"a", "b"} {
		h.nodes = append(h.nodes, &hnode{name: name, id: uint64(i + 1), snaps: map[uint64]*hnode{}})
	}
	return h
}

func (h *harness) node(name string) *hnode {
	for _, x := range h.nodes {
		if x.name == name {
			return x
		}
	}
	panic("no node " + name)
}

func (h *harness) byID(id uint64) *hnode {
	for _, x := range h.nodes {
		if x.id == id {
			return x
		}
	}
	return nil
}

func (h *harness) peerOf(x *hnode) *hnode {
	for _, y := range h.nodes {
		if y != x {
			return y
		}
	}
	return nil
}

func (h *harness) printf(format string, args ...any) { fmt.Fprintf(h.out, format+"\n", args...) }

// start starts (or restarts) x from its disk with a new run, or starts
// running x if it is opening.
func (h *harness) start(x *hnode) {
	if x.opening {
		x.opening = false
		x.lastRun = h.now
		x.n.Start(h.now)
		h.process(x)
		return
	}
	h.open(x)
	x.opening = false
	x.n.Start(h.now)
	h.process(x)
}

// open makes x's core from its disk with a new run, not yet running.
func (h *harness) open(x *hnode) {
	x.runs++
	cfg := x.cfg
	cfg.ID = x.id
	cfg.Peer = h.peerOf(x).id // as a real pair's configuration names it
	cfg.Lease = hLease
	cfg.Run = x.id<<32 | x.runs
	cfg.ReqSeed = x.id<<40 | x.runs<<32
	st := RestartState{Epochs: append([]EpochRecord(nil), x.epochs...), MaxTerm: x.term, Followed: x.followed, Now: h.now, Commit: min(x.commit, uint64(len(x.log)))}
	if len(x.log) > 0 {
		e := x.log[len(x.log)-1]
		st.Last, st.LastEpoch, st.LastSolo, st.Applied, st.Rev = e.Index, e.Epoch, e.Solo, e.Index, e.Rev
	}
	x.n = NewNode(cfg, st)
	x.lastRun = h.now
	x.frozenUntil = 0
	x.opening = true
}

// crash stops x: its messages in flight to and from it are lost; its disk
// keeps what it persisted (everything, in this harness).
func (h *harness) crash(x *hnode) {
	x.n = nil
	x.opening = false
	x.holdSync, x.unsynced, x.flushing = false, nil, nil
	keep := h.inflight[:0]
	for _, m := range h.inflight {
		if m.from != x && m.to != x {
			keep = append(keep, m)
		}
	}
	h.inflight = keep
}

// lose drops x's last n log entries, and the epoch records that start in
// them: a crash before they were synced. This harness reports Persisted
// at once, so x's commit covered them; they count as never acknowledged
// (a scenario that uses this must not rely on their acknowledgement, and
// must not let the peer hear x's durable index cover them: from
// ProtocolV4 on the peer commits what both hold durably. A flush that
// has not ended is "unsynced", which a crash loses as a disk would).
func (h *harness) lose(x *hnode, n int) {
	x.log = x.log[: len(x.log)-n : len(x.log)-n]
	for ; h.ackedTo > uint64(len(x.log)); h.ackedTo-- {
		delete(h.acked, h.ackedTo)
	}
	var left []EpochRecord
	for _, r := range x.epochs {
		if r.Start <= uint64(len(x.log)) {
			left = append(left, r)
		}
	}
	x.epochs = left
}

func (h *harness) alive(x *hnode) bool { return x.n != nil && !x.opening && h.now >= x.frozenUntil }

// run moves the clock by d: every live node ticks every hTick, and
// messages are delivered after every round of ticks.
func (h *harness) run(d time.Duration, only *hnode) {
	end := h.now + int64(d)
	for h.now < end {
		h.now = min(h.now+int64(hTick), end)
		for _, x := range h.nodes {
			if (only == nil || only == x) && h.alive(x) && h.now-x.lastRun >= int64(hTick) {
				x.lastRun = h.now
				x.n.Tick(h.now)
				h.process(x)
			}
		}
		h.deliver()
	}
}

// deliver delivers every message in flight to a live receiver, until none
// is left (messages to a frozen node wait), in rounds.
func (h *harness) deliver() {
	for round := 0; round < 1000; round++ {
		var next, wait []hmsg
		for _, m := range h.inflight {
			if !h.alive(m.to) {
				wait = append(wait, m)
				continue
			}
			next = append(next, m)
		}
		h.inflight = wait
		if len(next) == 0 {
			return
		}
		for _, m := range next {
			if m.to.n == nil {
				continue
			}
			m.m.Received = h.now
			if h.trace {
				h.printf("  %s->%s %s", m.from.name, m.to.name, describe(&m.m))
			}
			m.to.n.Step(m.m)
			h.process(m.to)
		}
	}
	panic("messages never settle: " + tailLines(h.out.String(), 60))
}

// process carries out x's Ready until it has none, as the driver would.
func (h *harness) process(x *hnode) {
	for x.n != nil && x.n.HasReady() {
		rd := x.n.Ready()
		if rd.ReadGrant.Narrows(x.grant) {
			x.grant = rd.ReadGrant
		}
		if rd.Truncate != 0 {
			h.truncate(x, rd.Truncate)
		}
		h.persist(x, &rd)
		peer := h.peerOf(x)
		for _, m := range rd.Messages {
			to := peer
			if m.To != 0 {
				to = h.byID(m.To)
			}
			h.sendMsg(x, to, m)
		}
		if rc := rd.RoleChange; rc != nil {
			h.printf("%s: %s -> %s: %s (epoch %s)", x.name, rc.From, rc.To, rc.Reason, rc.Epoch)
		}
		if rd.Stuck != nil {
			h.printf("%s: stuck: %q", x.name, *rd.Stuck)
		}
		for _, r := range rd.ReadStates {
			if r.Refused {
				h.printf("%s: read %d refused", x.name, r.ID)
			} else {
				h.printf("%s: read %d served at index %d", x.name, r.ID, r.Index)
			}
		}
		h.counters(x, rd.Counters)
		for _, s := range rd.Serve {
			h.serve(x, s)
		}
		if r := rd.HandoverResult; r != nil {
			h.printf("%s: hand-over ended: %v", x.name, r.Err)
		}
		x.grant = rd.ReadGrant
		x.n.Advance()
		if len(rd.Entries) > 0 && !x.holdSync {
			e := x.log[len(x.log)-1]
			x.n.Persisted(e.Index, e.Rev)
			x.n.Applied(e.Index)
		}
		h.check(x, &rd)
		h.effects(x, &rd)
		if rd.Merge != 0 {
			target := max(rd.Merge, lastRev(x.log)) + 1
			h.printf("%s: merging above revision %d", x.name, target-1)
			if err := x.n.Propose([]Entry{{Merge: true, Data: MergeData(target), Rev: target}}); err != nil {
				h.printf("%s: merge refused: %v", x.name, err)
			}
		}
	}
}

// persist writes rd's hard state and entries to x's disk.
func (h *harness) persist(x *hnode, rd *Ready) {
	hs := rd.HardState
	if hs.Term != 0 {
		x.term = hs.Term
	}
	x.followed = max(x.followed, hs.Followed)
	for _, d := range hs.Drop {
		for i, r := range x.epochs {
			if r.Epoch == d.Epoch {
				x.epochs = append(x.epochs[:i:i], x.epochs[i+1:]...)
				break
			}
		}
	}
	for _, p := range hs.Put {
		x.epochs = append(x.epochs, p)
		sort.Slice(x.epochs, func(i, j int) bool { return x.epochs[i].Epoch.Less(x.epochs[j].Epoch) })
	}
	if len(rd.Entries) > 0 {
		x.commit = rd.Commit
	}
	for _, e := range rd.Entries {
		if e.Index <= x.flushed && e.Index <= uint64(len(x.log)) {
			continue // flushed before it was proposed (flushFirst)
		}
		if e.Index <= uint64(len(x.log))+uint64(len(x.unsynced)) {
			panic(fmt.Sprintf("%s: entry %d rewritten", x.name, e.Index))
		}
		if x.holdSync {
			x.unsynced = append(x.unsynced, e)
		} else {
			x.log = append(x.log, e)
		}
	}
}

// sync makes x's unsynced entries durable and reports them, as the
// driver does when a flush that its messages did not wait for completes;
// x syncs at once from then on.
func (h *harness) sync(x *hnode) {
	x.holdSync = false
	if len(x.flushing) > 0 {
		h.flushed(x)
		return
	}
	if len(x.unsynced) == 0 {
		return
	}
	x.log = append(x.log, x.unsynced...)
	x.unsynced = nil
	e := x.log[len(x.log)-1]
	x.n.Persisted(e.Index, e.Rev)
	x.n.Applied(e.Index)
	h.process(x)
}

// truncate drops x's log after keep in place, as the driver does, unless
// an entry of the suffix is marked as one whose effects cannot be undone
// in place (data starting with "!").
func (h *harness) truncate(x *hnode, keep uint64) {
	for _, e := range x.log[keep:] {
		if strings.HasPrefix(string(e.Data), "!") {
			h.printf("%s: cannot drop the suffix after %d in place (entry %d)", x.name, keep, e.Index)
			x.n.Truncated(RestartState{}, errors.New("not droppable in place"))
			return
		}
	}
	h.printf("%s: dropped %d entries after %d in place", x.name, uint64(len(x.log))-keep, keep)
	x.log = x.log[:keep:keep]
	x.commit = min(x.commit, keep)
	var left []EpochRecord
	for _, r := range x.epochs {
		if r.Start <= keep {
			left = append(left, r)
		}
	}
	x.epochs = left
	st := RestartState{Epochs: append([]EpochRecord(nil), x.epochs...), MaxTerm: x.term, Followed: x.followed, Now: h.now}
	if keep > 0 {
		e := x.log[keep-1]
		st.Last, st.LastEpoch, st.LastSolo, st.Applied, st.Rev = e.Index, e.Epoch, e.Solo, e.Index, e.Rev
	}
	x.n.Truncated(st, nil)
}

// effects runs the slow effects that come back as inputs.
func (h *harness) effects(x *hnode, rd *Ready) {
	if rd.Fence {
		h.printf("%s: fence command runs", x.name)
		x.fencePend = true
	}
	if rd.SplitBrain != nil {
		x.conflicts++
		h.printf("%s: conflict records kept for entries after %d", x.name, rd.SplitBrain.DivergedAt)
		x.n.ConflictsKept(x.accepted, nil)
		h.process(x)
	}
	for _, c := range rd.Snapshot {
		if !c.Last {
			continue
		}
		src := h.peerOf(x).snaps[c.ID]
		if src == nil || uint64(len(src.log)) < c.Floor {
			h.printf("%s: stale snapshot ignored", x.name)
			x.n.Installed(RestartState{}, ErrStaleSnapshot)
		} else {
			x.log = append([]Entry(nil), src.log...)
			x.commit = src.commit // the leader's data file, with its bound
			x.epochs = append([]EpochRecord(nil), src.epochs...)
			x.term = max(x.term, src.term)
			st := RestartState{Epochs: x.epochs, MaxTerm: x.term, Followed: x.followed, Now: h.now}
			if len(x.log) > 0 {
				e := x.log[len(x.log)-1]
				st.Last, st.LastEpoch, st.LastSolo, st.Applied, st.Rev = e.Index, e.Epoch, e.Solo, e.Index, e.Rev
			}
			h.printf("%s: installed a snapshot up to index %d", x.name, st.Last)
			x.n.Installed(st, nil)
		}
		h.process(x)
	}
}

// runFence completes x's fence command.
func (h *harness) runFence(x *hnode) {
	if !x.fencePend || x.n == nil {
		return
	}
	x.fencePend = false
	h.printf("%s: fence command done: %v", x.name, x.fenceErr)
	x.n.Fenced(x.fenceErr)
	h.process(x)
}

func (h *harness) counters(x *hnode, c Counters) {
	for _, kv := range []struct {
		name string
		v    int
	}{{"stale answers", c.StaleAnswers}, {"failovers", c.Failovers}, {"false failovers", c.FalseFailovers}, {"solo entered", c.SoloEntered}, {"split brains", c.SplitBrains}} {
		if kv.v != 0 {
			h.printf("%s: %s +%d", x.name, kv.name, kv.v)
		}
	}
	for r, v := range c.Refused {
		if v != 0 {
			h.printf("%s: refused (%s) +%d", x.name, Refusal(r), v)
		}
	}
	if c.ProtocolMismatch != 0 {
		h.printf("%s: protocol mismatches +%d", x.name, c.ProtocolMismatch)
	}
}

func (h *harness) sendMsg(from, to *hnode, m Message) {
	if to == nil || to.n == nil {
		return
	}
	link := [2]string{from.name, to.name}
	if h.cut[link] || h.drop[link][m.Kind] {
		return
	}
	if _, ok := h.held[link]; ok && (h.holdKind[link] == 0 || h.holdKind[link] == m.Kind) {
		h.held[link] = append(h.held[link], hmsg{from: from, to: to, m: m})
		return
	}
	h.inflight = append(h.inflight, hmsg{from: from, to: to, m: m})
}

// serve answers a catch-up or snapshot request from x's disk, as the
// driver's catch-up server does.
func (h *harness) serve(x *hnode, s ServeRequest) {
	to := h.byID(s.To)
	if to == nil {
		to = h.peerOf(x)
	}
	if s.Snapshot {
		x.snaps[s.ID] = &hnode{log: append([]Entry(nil), x.log...), epochs: append([]EpochRecord(nil), x.epochs...), term: x.term}
		h.sendMsg(x, to, Message{Kind: KindSnapChunk, From: x.id, To: to.id, Term: s.ID, Flags: FlagLast, Chunk: []byte("snapshot")})
		return
	}
	c := s.Catchup
	m := Message{Kind: KindCatchup, From: x.id, To: to.id, Term: s.ID, Index: c.From}
	// A node that sends its batches before its flush serves what it
	// wrote, synced or not, as the simulator's driver does
	// (sim.catchupEnd); otherwise only what is synced.
	log := x.log
	if x.n.SendsBeforeFlush() {
		log = append(log[:len(log):len(log)], x.unsynced...)
	}
	last, first := uint64(len(log)), uint64(0)
	if last > 0 {
		first = 1
	}
	var prev Epoch
	havePrev := c.From > 1 && c.From-1 <= last
	if havePrev {
		prev = log[c.From-2].Epoch
	}
	switch m.Flags = CatchupVerdict(c, first, last, prev, havePrev); {
	case m.Flags == FlagDiverged:
		m.Epochs = append([]EpochRecord(nil), x.epochs...)
	case m.Flags == 0 && c.From <= last:
		m.Entries = append([]Entry(nil), log[c.From-1:min(last, c.From-1+64)]...)
	}
	h.sendMsg(x, to, m)
}

func lastRev(log []Entry) int64 {
	if len(log) == 0 {
		return 0
	}
	return log[len(log)-1].Rev
}

// propose proposes one entry with data on x.
func (h *harness) propose(x *hnode, data string) error {
	e := []Entry{{Data: []byte(data), Rev: lastRev(x.log) + int64(len(x.n.unapplied)) + 1, Origin: x.id}}
	if !x.n.SendsBeforeFlush() {
		return h.flushFirst(x, e)
	}
	if err := x.n.Propose(e); err != nil {
		return err
	}
	h.process(x)
	return nil
}

// kindNames names message kinds in scripts.
func kindByName(name string) (uint16, bool) {
	for k, v := range map[string]uint16{
		"heartbeat": KindHeartbeat, "entries": KindEntries, "ack": KindAck,
		"catchup-req": KindCatchupReq, "catchup": KindCatchup, "snap-req": KindSnapReq,
		"snap-chunk": KindSnapChunk, "merge-req": KindMergeReq, "leaving": KindLeaving,
		"handover": KindHandover, "handover-ack": KindHandoverAck,
	} {
		if k == name {
			return v, true
		}
	}
	return 0, false
}

// describe prints a message for traces.
func describe(m *Message) string {
	switch m.Kind {
	case KindHeartbeat:
		hb := &m.Heartbeat
		return fmt.Sprintf("heartbeat %s epoch=%s applied=%d commit=%d", hb.Role, hb.Epoch, hb.Applied, hb.Commit)
	case KindEntries:
		return fmt.Sprintf("entries %d..%d", m.Index, m.Index+uint64(len(m.Entries))-1)
	case KindAck:
		return fmt.Sprintf("ack %d", m.Index)
	case KindCatchupReq:
		return fmt.Sprintf("catch-up request from %d", m.Index)
	case KindCatchup:
		return fmt.Sprintf("catch-up answer %d entries flags=%d", len(m.Entries), m.Flags)
	case KindSnapReq:
		return fmt.Sprintf("snapshot request floor=%d", m.Index)
	case KindSnapChunk:
		return fmt.Sprintf("snapshot chunk at %d", m.Index)
	case KindMergeReq:
		return fmt.Sprintf("merge request above %d", m.MergeRev)
	case KindLeaving:
		return "leaving"
	case KindHandover:
		return fmt.Sprintf("hand-over last=%d", m.Handover.Last)
	case KindHandoverAck:
		return fmt.Sprintf("hand-over ack refused=%v", m.Handover.Refused)
	}
	return fmt.Sprintf("kind %d", m.Kind)
}

// status prints one line per node.
func (h *harness) status() {
	for _, x := range h.nodes {
		if x.n == nil {
			h.printf("%s: down (log %d)", x.name, len(x.log))
			continue
		}
		st := x.n.Status()
		h.printf("%s: %s epoch=%s last=%d commit=%d lease=%v", x.name, st.Role, st.Epoch, st.Last, st.Commit, st.LeaseUntil > h.now)
	}
}

func tailLines(s string, n int) string {
	ls := strings.Split(s, "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
