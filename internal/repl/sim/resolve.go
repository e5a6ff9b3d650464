package sim

import (
	"math"

	"github.com/anishathalye/porcupine"
)

// resolveUnknown settles, from the history itself, what it can of the
// puts whose outcome the client never learnt, so that porcupine need not
// try every place for them. Each such put stays open until the end of
// time, and porcupine's search grows with the number of open operations
// that may or may not have taken effect: seed 36's 353 operations with 11
// of them were still undecided after 4 minutes.
//
// The rules use only what the model itself implies, so a history is
// linearizable after them exactly when it was before. Every put writes a
// value of its own (v<op ID>) and makes exactly one revision, and the
// store's revision reaches r only through the put that makes r:
//   - A read that returned a put's value with mod revision m saw that put
//     take effect at m: it becomes a put that returned revision m (a
//     second read that disagrees still fails the model).
//   - A revision up to the highest one any operation saw that no known
//     put makes (a gap) was made by an unknown put, one that was called
//     before the earliest return of an operation that saw the gap's
//     revision or a later one, and of a key that no read at that
//     revision or later shows unwritten since before it. If only one
//     unknown put qualifies, it is the gap's put.
//   - A put settled at revision r took effect before every operation that
//     saw r or later, so it returned no later than the earliest of those.
//   - An unknown put that qualifies for no gap took no revision that any
//     operation saw: it either never happened or happened after
//     everything recorded, and is left out (placed last, it changes no
//     outcome).
//
// A gap with several candidates is left to candidateHistories.
//
// It returns a new slice (ops is not changed) and, when some gap still
// has more than one candidate, the first such gap and the indexes of its
// candidates in the returned slice.
func resolveUnknown(ops []porcupine.Operation) (out []porcupine.Operation, gap int64, cands []int) {
	out = append([]porcupine.Operation(nil), ops...)
	open := map[int]bool{} // indexes in out of unknown puts not yet settled
	byValue := map[string]int{}
	for i, op := range out {
		if op.Input.(Input).Put && op.Output.(Output).Unknown {
			open[i] = true
			byValue[op.Input.(Input).Value] = i
		}
	}
	if len(open) == 0 {
		return out, 0, nil
	}
	for _, op := range out {
		in, o := op.Input.(Input), op.Output.(Output)
		if in.Put || o.Unknown || !o.Found {
			continue
		}
		if i, ok := byValue[o.Value]; ok && open[i] && out[i].Input.(Input).Key == in.Key {
			delete(open, i)
			settle(out, i, o.ModRev)
		}
	}
	for {
		gaps := revisionGaps(out)
		byGap := make([][]int, len(gaps))
		any := map[int]bool{}
		for gi, g := range gaps {
			by := returnedBy(out, g, math.MinInt64)
			for i := range out {
				if open[i] && out[i].Call < by && !unwrittenAt(out, out[i].Input.(Input).Key, g) {
					byGap[gi] = append(byGap[gi], i)
					any[i] = true
				}
			}
		}
		settled := false
		for gi, c := range byGap {
			if len(c) == 1 && open[c[0]] {
				delete(open, c[0])
				settle(out, c[0], gaps[gi])
				settled = true
			}
		}
		if settled {
			continue // the gaps and candidates change
		}
		kept, at := out[:0], map[int]int{}
		for i, op := range out {
			if !open[i] || any[i] {
				at[i] = len(kept)
				kept = append(kept, op)
			}
		}
		for gi, c := range byGap {
			if len(c) > 1 {
				for _, i := range c {
					cands = append(cands, at[i])
				}
				return kept, gaps[gi], cands
			}
		}
		return kept, 0, nil
	}
}

// settle makes the unknown put ops[i] a put that made revision rev.
func settle(ops []porcupine.Operation, i int, rev int64) {
	ops[i].Output = Output{Rev: rev}
	ops[i].Return = returnedBy(ops, rev, ops[i].Call)
}

// candidateHistories returns histories without the ambiguity
// resolveUnknown leaves: for a gap with several candidates, one history
// per candidate in which that candidate made the gap's revision, each
// resolved again. The history is linearizable exactly when one of them
// is (some put made that revision, and only a candidate can have). It
// returns nil when that takes more than limit histories.
func candidateHistories(ops []porcupine.Operation, limit int) [][]porcupine.Operation {
	out, gap, cands := resolveUnknown(ops)
	if len(cands) == 0 {
		return [][]porcupine.Operation{out}
	}
	var all [][]porcupine.Operation
	for _, i := range cands {
		b := append([]porcupine.Operation(nil), out...)
		settle(b, i, gap)
		sub := candidateHistories(b, limit-len(all))
		if sub == nil || len(all)+len(sub) > limit {
			return nil
		}
		all = append(all, sub...)
	}
	return all
}

// revisionGaps lists the revisions, up to the highest one any operation
// saw, that no put with a known revision makes.
func revisionGaps(ops []porcupine.Operation) []int64 {
	made := map[int64]bool{}
	var seen int64
	for _, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		if o.Unknown {
			continue
		}
		seen = max(seen, o.Rev)
		if in.Put {
			made[o.Rev] = true
		}
	}
	var gaps []int64
	for r := int64(1); r <= seen; r++ {
		if !made[r] {
			gaps = append(gaps, r)
		}
	}
	return gaps
}

// unwrittenAt reports whether a read shows that key was not written at
// revision rev: it saw rev or later, and key absent or last written
// before rev.
func unwrittenAt(ops []porcupine.Operation, key string, rev int64) bool {
	for _, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		if !in.Put && !o.Unknown && in.Key == key && o.Rev >= rev && (!o.Found || o.ModRev < rev) {
			return true
		}
	}
	return false
}

// returnedBy is the earliest return of an operation that saw revision rev
// or later (math.MaxInt64: none, or one that returned before call, which
// the model finds illegal anyway).
func returnedBy(ops []porcupine.Operation, rev, call int64) int64 {
	ret := int64(math.MaxInt64)
	for _, op := range ops {
		if o := op.Output.(Output); !o.Unknown && o.Rev >= rev && op.Return < ret {
			ret = op.Return
		}
	}
	if ret <= call {
		return math.MaxInt64
	}
	return ret
}
