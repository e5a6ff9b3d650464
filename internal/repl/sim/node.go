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
	n.tick()
	ds := n.deferred
	n.deferred = nil
	for _, fn := range ds {
		if n.n == nil {
			return
		}
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

// later runs fn now, or at the thaw if the node is frozen.
func (n *node) later(fn func()) bool {
	if n.up() {
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
