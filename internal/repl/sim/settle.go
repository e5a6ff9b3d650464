package sim

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Settling unknown puts from the store's own record. A real client that
// timed out never learns whether its put took effect, so a checker must
// try every place for it (resolve.go narrows that down, but with 15 or
// more such puts porcupine could still run for minutes: seeds 709283 and
// 2003445 were unchecked after 10 minutes). The simulator knows what a
// client does not: the log of the leader that every node agrees on once
// everything healed. Every put writes a value of its own, so the log
// says for each put whether it took effect and at which revision.
//
// CheckSettled makes each unknown put what the log says it was:
//   - its value is in the log at revision r, and some operation saw r or
//     a later revision: a put that made r and returned, at the latest,
//     when the first operation that saw r or later returned (the model
//     itself implies both: only the put that makes r raises the store to
//     r, and settle in resolve.go states the bound);
//   - its value is not in the log, or only at a revision above every one
//     an operation saw: it is left out. Left out is what the model allows
//     an open put anyway: placed after everything recorded, it changes no
//     outcome.
//
// Why this is no weaker than checking the recorded history. The settled
// history is one of the ways porcupine may complete the recorded one (each
// open put linearized at one revision, or last), so a settled history
// that porcupine accepts is one the recorded check accepts too: the
// settling removes the checker's guessing and no constraint of any
// operation. It can only be stronger: porcupine no longer may place a put
// where the store did not put it. So:
//   - a read that saw a value the store later lost (an entry truncated, or
//     lost unsynced in a crash, and missing from the final log) refers to
//     a put that is left out, and fails the model;
//   - a revision order the log contradicts (a read at r or later showing
//     the put's key unwritten, a read that saw the value at another mod
//     revision, two puts at one revision) fails it too.
//
// Split brains and conflict records: when two nodes led at once, a split
// brain was counted, or a write was kept as a conflict record, the world
// does not run porcupine at all (World.settled): the final log then
// rightly lacks writes clients saw, and the checker's deferred rules judge
// such runs. A settled history therefore never has to explain a write that
// lives only in a conflict record.
//
// A crash that lost unsynced entries: the final log is what survived, and
// that is the truth the settling uses. A put lost that way and never seen
// is left out (as it never took effect); one that was seen fails the
// check, as it should: a read must not show what the store then forgets.

// Truth is the final leader's log as the checker needs it: for each value
// written, its key and the revision it made.
type Truth map[string]Written

// Written is one put in the final log.
type Written struct {
	Key string
	Rev int64
}

// settleFromTruth returns a copy of ops with every unknown put settled or
// left out as the package comment above describes (ops is not changed).
func settleFromTruth(ops []porcupine.Operation, truth Truth) []porcupine.Operation {
	var seen int64 // the highest revision an operation with a known outcome saw
	for _, op := range ops {
		if o := op.Output.(Output); !o.Unknown {
			seen = max(seen, o.Rev)
		}
	}
	out := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		if !in.Put || !o.Unknown {
			out = append(out, op)
			continue
		}
		w, ok := truth[in.Value]
		if !ok || w.Key != in.Key || w.Rev > seen {
			continue // never took effect, or after everything recorded
		}
		// returnedBy reads only operations with known outcomes, so the
		// bound comes from the recorded history, not from other
		// settlements.
		op.Output, op.Return = Output{Rev: w.Rev}, returnedBy(ops, w.Rev, op.Call)
		out = append(out, op)
	}
	return out
}

// CheckSettled checks the history with its unknown puts settled from
// truth (timeout 0: no limit). It returns what Check returns: "" when
// linearizable, else the failure's kind and why.
func (h *History) CheckSettled(truth Truth, timeout time.Duration) (kind, why string) {
	ops := settleFromTruth(h.ops, truth)
	switch checkLinearizable(ops, timeout) {
	case porcupine.Ok:
		return "", ""
	case porcupine.Illegal:
		return "not-linearizable", fmt.Sprintf("history of %d operations (%d with unknown outcome, settled from the final log: %d took effect) is not linearizable",
			len(h.ops), h.Unknown(), len(ops)-(len(h.ops)-h.Unknown()))
	}
	return "porcupine-timeout", fmt.Sprintf("porcupine did not finish checking %d operations (%d with unknown outcome, settled from the final log) within %v", len(h.ops), h.Unknown(), timeout)
}
