package sim

import (
	"fmt"
	"sort"
)

// The invariants of docs/engine-v2.md ("Deterministic simulation"),
// checked as the world runs. The checker knows nothing of the core: the
// adapter reports acknowledgements, applies, reads and conflict records,
// and a View of each node after every step.
//
// A two-way partition (both directions between the nodes cut at once) is
// the only fault that may end in a split brain. Until one happened every
// check is strict and fails at once. After one, an acknowledged write may
// be missing from a node or a read only if that write ends up in a
// conflict record: those checks are deferred to Final.

// mergeID marks the entry ID of a merge entry (the adapter's), which is
// not a client's write.
const mergeID = 1 << 63

// EpochID names an epoch (term, leading node) without the core's types.
type EpochID struct{ Term, Node uint64 }

// View is what the checker sees of a node after a step.
type View struct {
	Up    bool // running and not frozen
	Leads bool // primary or solo: it acknowledges writes
	Role  string
	Epoch EpochID
	// Gen changes whenever the node's log may have lost or replaced
	// entries (a restart, a snapshot install).
	Gen uint64
	// WriteAt returns the write ID of the entry at index (ok false: none).
	WriteAt func(index uint64) (id uint64, ok bool)
}

// Failure is a violated invariant.
type Failure struct {
	Kind   string // a short stable name: shrinking keeps failures of one kind
	Detail string
	At     int64 // virtual time
}

func (f *Failure) Error() string {
	return fmt.Sprintf("%s at %.3fs: %s", f.Kind, float64(f.At)/1e9, f.Detail)
}

type ack struct {
	id, index uint64
	key       string
	rev       int64
	epoch     EpochID
	node      int
	at        int64
	solo      bool // acknowledged by a leader alone
}

// Checker holds what the invariants need. Not safe for concurrent use: a
// world owns one.
type Checker struct {
	now      func() int64
	fail     *Failure
	twoWay   bool
	acked    []ack
	ackedAt  map[uint64]ack    // index -> first write acknowledged there
	byKey    map[string][]ack  // acknowledgements per key, in time order
	lastAck  []ack             // newest acknowledgement per leading node (by node index)
	conflict map[uint64]bool   // write IDs kept as conflict records
	applied  map[uint64]ack    // index -> first entry applied there (by any node)
	writeIdx map[uint64]uint64 // write ID -> the index it was first applied at
	visible  []int64           // newest visible revision per node
	checked  []int             // per node: acked[:checked] found in its log
	gen      []uint64
	deferred []deferred
	crashed  [][]int64 // per node, the times it crashed
	clocks   []clockRead
	maxPPM   int64
	// Conflicts counts conflict records (a figure).
	Conflicts int

	// nodeApplied, per node: index -> the entry ID it last applied there.
	nodeApplied []map[uint64]uint64
}

type deferred struct {
	id  uint64 // the write that must end in the store or a conflict record
	idx uint64 // its index
	why string
	at  int64
}

// clockRead is a node's clock reading at virtual time v.
type clockRead struct {
	resets   uint64
	v, local int64
}

// NewChecker returns a checker for n nodes; now reads the virtual time.
func NewChecker(n int, now func() int64) *Checker {
	return &Checker{clocks: make([]clockRead, n),
		now: now, ackedAt: map[uint64]ack{}, byKey: map[string][]ack{},
		lastAck: make([]ack, n), conflict: map[uint64]bool{}, applied: map[uint64]ack{}, writeIdx: map[uint64]uint64{},
		visible: make([]int64, n), checked: make([]int, n), gen: make([]uint64, n), crashed: make([][]int64, n),
		nodeApplied: make([]map[uint64]uint64, n),
	}
}

// BoundDrift makes Clock check that every clock runs within ppm parts per
// million of virtual time (0: no bound).
func (c *Checker) BoundDrift(ppm int64) { c.maxPPM = ppm }

// Clock checks node's clock reading local at virtual time v (resets: its
// count of reboots): between two readings of one boot it never goes
// backwards, and it advances by the virtual time elapsed within the drift
// bound (the core's leases rely on both; a slack of 1 ns per reading
// covers integer rounding).
func (c *Checker) Clock(node int, resets uint64, v, local int64) {
	p := c.clocks[node]
	c.clocks[node] = clockRead{resets: resets, v: v, local: local}
	if p.resets != resets || p.v == 0 {
		return
	}
	dv, dl := v-p.v, local-p.local
	if dl < 0 {
		c.Fail("clock", "node %d's clock went back from %d to %d", node, p.local, local)
		return
	}
	if c.maxPPM > 0 {
		if off := dl - dv; off*1_000_000 > dv*c.maxPPM+1_000_000 || -off*1_000_000 > dv*c.maxPPM+1_000_000 {
			c.Fail("clock", "node %d's clock ran %d ns in %d ns of virtual time, beyond %d ppm", node, dl, dv, c.maxPPM)
		}
	}
}

// Failed is the first violation (nil: none).
func (c *Checker) Failed() *Failure { return c.fail }

// Fail records a violation (only the first one is kept).
func (c *Checker) Fail(kind, format string, args ...any) {
	if c.fail == nil {
		c.fail = &Failure{Kind: kind, Detail: fmt.Sprintf(format, args...), At: c.now()}
	}
}

// TwoWayCut records that the nodes were cut from each other both ways.
func (c *Checker) TwoWayCut() { c.twoWay = true }

// excuse fails at once before any two-way partition. After one, both
// nodes may serve apart, so a leader may lack the other's writes and a
// read may miss them: the judgement waits for Final, where write id must
// be in the settled leader's log at index idx or in a conflict record.
func (c *Checker) excuse(id, idx uint64, kind, format string, args ...any) {
	if !c.twoWay {
		c.Fail(kind, format, args...)
		return
	}
	c.deferred = append(c.deferred, deferred{id: id, idx: idx, why: kind + ": " + fmt.Sprintf(format, args...), at: c.now()})
}

// Crashed records a crash of node.
func (c *Checker) Crashed(node int) { c.crashed[node] = append(c.crashed[node], c.now()) }

// secondFault reports whether a's loss is outside the contract: it was
// acknowledged by a leader alone (the first fault), whose leader then
// crashed (the second). A node that led last may then serve without it
// (docs/ARCHITECTURE.md, "Serving alone after a restart").
func (c *Checker) secondFault(a ack) bool {
	if !a.solo {
		return false
	}
	l := c.leaderIndex(a.epoch.Node)
	if l < 0 {
		return false
	}
	for _, t := range c.crashed[l] {
		if t >= a.at {
			return true
		}
	}
	return false
}

// Ack records that node acknowledged write id (a put of key at index,
// revision rev, in epoch; solo: its leader acknowledged it alone) to its
// client.
func (c *Checker) Ack(node int, id, index uint64, key string, rev int64, epoch EpochID, solo bool) {
	a := ack{id: id, index: index, key: key, rev: rev, epoch: epoch, node: node, at: c.now(), solo: solo}
	if prev, ok := c.ackedAt[index]; ok && prev.id != id && !c.secondFault(prev) {
		c.excuse(prev.id, prev.index, "divergent-acks", "writes %d and %d both acknowledged at index %d", prev.id, id, index)
	} else if !ok {
		c.ackedAt[index] = a
	}
	// No two leaders acknowledge at once: once a leader acknowledged in a
	// newer epoch, no other leader acknowledges in an older one, unless
	// the newer leader had applied this very write at this index. That is
	// a late answer, not a second leader: the write was part of the
	// history the newer epoch took over (a frozen primary that thaws to
	// its replica's acks answers them). The design note's invariant is
	// about epoch ranges ("no two nodes acknowledge writes in the same
	// epoch range"), and porcupine still checks the late answer.
	for i, l := range c.lastAck {
		if l.id != 0 && l.epoch.Node != epoch.Node && epoch.Term < l.epoch.Term && !c.inHistory(id, index, l) {
			c.excuse(id, index, "two-leaders", "write %d acknowledged in epoch %d/%d after node %d acknowledged write %d in epoch %d/%d",
				id, epoch.Term, epoch.Node, i, l.id, l.epoch.Term, l.epoch.Node)
		}
	}
	if leader := c.leaderIndex(epoch.Node); leader >= 0 {
		c.lastAck[leader] = a
	}
	c.acked = append(c.acked, a)
	c.byKey[key] = append(c.byKey[key], a)
}

// inHistory reports whether the node that acknowledged l had applied
// write id at index (the newer leader holds it in its own history).
func (c *Checker) inHistory(id, index uint64, l ack) bool {
	got, ok := c.nodeApplied[l.node][index]
	return ok && got == id
}

// leaderIndex maps a node ID to its index (IDs are index+1 in a world).
func (c *Checker) leaderIndex(id uint64) int {
	if id == 0 || id > uint64(len(c.lastAck)) {
		return -1
	}
	return int(id - 1)
}

// Applied records that node applied entry index (entry ID id, a write ID
// or a merge's, of epoch; solo: logged by a leader alone) and now shows
// revision rev. Two nodes never apply different entries at one index,
// unless a split brain or a second fault (see secondFault) allows it, and
// no write is applied at two indexes: a client's write takes effect once
// (a forwarded write that the network duplicated is logged once).
func (c *Checker) Applied(node int, index, id uint64, rev int64, epoch EpochID, solo bool) {
	a := ack{id: id, index: index, epoch: epoch, node: node, at: c.now(), solo: solo}
	if id&mergeID == 0 {
		if first, ok := c.writeIdx[id]; !ok {
			c.writeIdx[id] = index
		} else if first != index {
			c.Fail("duplicate-write", "node %d applied write %d at index %d, which was applied at index %d before", node, id, index, first)
		}
	}
	if c.nodeApplied[node] == nil {
		c.nodeApplied[node] = map[uint64]uint64{}
	}
	c.nodeApplied[node][index] = id
	if prev, ok := c.applied[index]; !ok {
		c.applied[index] = a
	} else if prev.id != id && !c.twoWay && !c.secondFault(prev) && !c.secondFault(a) {
		c.Fail("divergent-apply", "node %d applied entry %d at index %d where another node applied %d", node, id, index, prev.id)
	}
	c.Visible(node, rev)
}

// Visible records the revision node shows now: it never decreases, not
// even across restarts and snapshot installs.
func (c *Checker) Visible(node int, rev int64) {
	if rev < c.visible[node] {
		c.Fail("revision-backwards", "node %d shows revision %d after %d", node, rev, c.visible[node])
		return
	}
	c.visible[node] = rev
}

// Read checks a linearizable read of key on node that started at call and
// returned out: it must not be older than any write of key acknowledged
// before call. Only a leader may miss writes after a two-way partition
// (both sides serve apart); a replica serves only under a read lease that
// the other side's leader waited out, so its reads are always judged at
// once. A write already kept as a conflict record is no longer part of the
// history (the side that wrote it lost the split brain and gave it up,
// docs/ARCHITECTURE.md "Split brain"): a read after the merge rightly
// misses it.
func (c *Checker) Read(node int, leads bool, key string, call int64, out Output) {
	for _, a := range c.byKey[key] {
		if a.at >= call {
			break
		}
		if (!out.Found || out.ModRev < a.rev) && !c.secondFault(a) && !c.conflict[a.id] {
			if !leads {
				c.Fail("stale-read", "replica %d read %s at mod revision %d (found %v), but write %d (revision %d) was acknowledged at %.3fs, before the read began at %.3fs",
					node, key, out.ModRev, out.Found, a.id, a.rev, float64(a.at)/1e9, float64(call)/1e9)
				return
			}
			c.excuse(a.id, a.index, "stale-read", "node %d read %s at mod revision %d (found %v), but write %d (revision %d) was acknowledged at %.3fs, before the read began at %.3fs",
				node, key, out.ModRev, out.Found, a.id, a.rev, float64(a.at)/1e9, float64(call)/1e9)
		}
	}
}

// Conflict records that node kept write id as a conflict record. Without
// a two-way partition only a second fault explains that: the node led
// alone and then crashed, and its peer, which led last as far as it knew,
// came back alone (docs/ARCHITECTURE.md, "Serving alone after a restart").
// A node that never crashed losing its writes to a restarted peer is the
// made-up split brain.
func (c *Checker) Conflict(node int, id uint64) {
	if !c.twoWay && len(c.crashed[node]) == 0 {
		c.Fail("made-up-split-brain", "node %d kept write %d as a conflict record, but the nodes were never cut from each other both ways and it never crashed", node, id)
	}
	if !c.conflict[id] {
		c.conflict[id] = true
		c.Conflicts++
	}
}

// Step checks the views after a step: a node that leads holds every
// acknowledged write at its index.
func (c *Checker) Step(views []View) {
	for i, v := range views {
		if v.Gen != c.gen[i] {
			c.gen[i], c.checked[i] = v.Gen, 0
		}
		if !v.Up || !v.Leads {
			continue
		}
		for ; c.checked[i] < len(c.acked); c.checked[i]++ {
			a := c.acked[c.checked[i]]
			if id, ok := v.WriteAt(a.index); (!ok || id != a.id) && !c.secondFault(a) {
				c.excuse(a.id, a.index, "lost-write", "node %d leads (%s, epoch %d/%d) without write %d acknowledged at index %d (it holds %d there, present %v)",
					i, v.Role, v.Epoch.Term, v.Epoch.Node, a.id, a.index, id, ok)
			}
		}
	}
}

// Final checks, at the end of a run, that every acknowledged write is in
// the leader's log (views of a settled world) or in a conflict record, and
// that every deferred judgement was excused by a conflict record.
func (c *Checker) Final(views []View) {
	leader := -1
	for i, v := range views {
		if v.Up && v.Leads {
			leader = i
		}
	}
	if leader >= 0 {
		for _, a := range c.acked {
			if id, ok := views[leader].WriteAt(a.index); (!ok || id != a.id) && !c.conflict[a.id] && !c.secondFault(a) {
				c.Fail("lost-write", "write %d acknowledged at index %d is neither in the leader's log nor a conflict record", a.id, a.index)
			}
		}
	}
	sort.SliceStable(c.deferred, func(i, j int) bool { return c.deferred[i].at < c.deferred[j].at })
	for _, d := range c.deferred {
		kept := false
		if leader >= 0 {
			id, ok := views[leader].WriteAt(d.idx)
			kept = ok && id == d.id
		}
		if !c.conflict[d.id] && !kept {
			c.Fail(d.why[:indexByte(d.why, ':')], "%s (and write %d is neither in the leader's log nor a conflict record)", d.why, d.id)
		}
	}
}

func indexByte(s string, b byte) int {
	for i := 0; i < len(s); i++ {
		if s[i] == b {
			return i
		}
	}
	return len(s)
}
