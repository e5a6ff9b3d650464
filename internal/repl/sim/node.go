package sim

// The parts of a simulated node that do not touch the protocol core: its
// clock reading, freezes, and the client-side bookkeeping of its driver.
// (adapter*.go hold the rest, and are the only files that import the core.)

import "sort"

// kvAt is a key's value in the simulated store and the revision that wrote it.
type kvAt struct {
	value  string
	modRev int64
}

// released is a read the core released at index, served once applied.
type released struct {
	op    *Op
	index uint64
}

// fwdWrite is a write a replica forwards to its primary; fwdRefused the
// primary's answer when it could not log it.
type fwdWrite struct {
	origin, id uint64
	key, value string
}
type fwdRefused struct{ id uint64 }

// seenWrites holds the forwarded writes one run of a node logged or
// refused, by (origin, write ID). A duplicate packet is dropped, as the
// server's dedup ring does (internal/server/forward.go), instead of being
// logged a second time at a later revision. A refused write stays
// refused: the refusal (fwdRefused, which the server does not send: its
// replica's caller times out instead) tells the client the write did not
// happen, and a duplicate logged once this node leads would make that a
// lie (seed 24603). Like the server's, it lives as long as the run.
type seenWrites map[[2]uint64]bool

func (n *node) now() int64 { return n.clock.Local(n.w.q.Now()) }

func (n *node) up() bool { return n.n != nil && n.w.q.Now() >= n.frozenUntil }

// idle reports whether the node takes inputs now: it runs, is not frozen,
// and its loop is not waiting for a flush of its own batch (the flush
// before the send of a pair below ProtocolV3, adapter_versions.go).
func (n *node) idle() bool { return n.up() && !n.flushing }

func (n *node) leads() bool { return n.up() && n.n.Role().Leads() }

// freeze stops the node stepping for d.
func (n *node) freeze(d int64) {
	if n.n == nil {
		return
	}
	until := max(n.frozenUntil, n.w.q.Now()+d)
	n.frozenUntil = until
	gen := n.gen
	n.w.q.At(until, func() {
		if n.gen == gen && n.frozenUntil == until {
			n.thaw()
		}
	})
}

// thaw resumes a frozen node: its timer fires late, then what waited runs.
func (n *node) thaw() {
	n.frozenUntil = 0
	if n.flushDone {
		n.finishFlush() // the flush ended while the node was frozen
	}
	if n.flushing {
		// The timer fires once the flush is done, first of what waited.
		n.deferred = append([]func(){n.tick}, n.deferred...)
	} else {
		n.tick()
	}
	n.drain()
}

// drain runs what waited, oldest first, while the node takes inputs: a
// deferred input that starts a flush leaves the rest waiting for it.
func (n *node) drain() {
	for len(n.deferred) > 0 && n.idle() {
		fn := n.deferred[0]
		n.deferred = n.deferred[1:]
		fn()
		n.w.step()
	}
}

// heal restarts a stopped node and thaws a frozen one (end of a run).
func (n *node) heal() {
	n.fence = fence{d: quickFence}
	if n.n == nil {
		n.restart(false)
	} else if !n.up() {
		n.thaw()
	}
}

// later runs fn now, or at the thaw if the node is frozen (at the end of
// its flush if it is flushing).
func (n *node) later(fn func()) bool {
	if n.idle() {
		fn()
		return true
	}
	n.deferred = append(n.deferred, fn)
	return false
}

func sortedKeys(m map[uint64]*Op) []uint64 {
	ks := make([]uint64, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}
