package sim

import (
	"math"
	"slices"

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
// Gaps with several candidates are left to candidateHistories.
//
// It returns a new slice (ops is not changed), the gaps left, and the
// indexes in it of the unknown puts left open (each a candidate for at
// least one of those gaps).
func resolveUnknown(ops []porcupine.Operation) (out []porcupine.Operation, gaps []int64, open []int) {
	out = append([]porcupine.Operation(nil), ops...)
	isOpen := map[int]bool{} // indexes in out of unknown puts not yet settled
	byValue := map[string]int{}
	for i, op := range out {
		if op.Input.(Input).Put && op.Output.(Output).Unknown {
			isOpen[i] = true
			byValue[op.Input.(Input).Value] = i
		}
	}
	if len(isOpen) == 0 {
		return out, nil, nil
	}
	for _, op := range out {
		in, o := op.Input.(Input), op.Output.(Output)
		if in.Put || o.Unknown || !o.Found {
			continue
		}
		if i, ok := byValue[o.Value]; ok && isOpen[i] && out[i].Input.(Input).Key == in.Key {
			delete(isOpen, i)
			settle(out, i, o.ModRev)
		}
	}
	for {
		gaps = revisionGaps(out)
		byGap := make([][]int, len(gaps))
		any := map[int]bool{}
		for gi, g := range gaps {
			for i := range out {
				if isOpen[i] && canFill(out, i, g) {
					byGap[gi] = append(byGap[gi], i)
					any[i] = true
				}
			}
		}
		settled := false
		for gi, c := range byGap {
			if len(c) == 1 && isOpen[c[0]] {
				delete(isOpen, c[0])
				settle(out, c[0], gaps[gi])
				settled = true
			}
		}
		if settled {
			continue // the gaps and candidates change
		}
		kept := out[:0]
		for i, op := range out {
			if !isOpen[i] || any[i] {
				if isOpen[i] {
					open = append(open, len(kept))
				}
				kept = append(kept, op)
			}
		}
		return kept, gaps, open
	}
}

// canFill reports whether the unknown put ops[i] can have made revision
// gap: it was called before the earliest return of an operation that saw
// gap or later, and no read at gap or later shows its key unwritten
// there.
func canFill(ops []porcupine.Operation, i int, gap int64) bool {
	return ops[i].Call < returnedBy(ops, gap, math.MinInt64) && !unwrittenAt(ops, ops[i].Input.(Input).Key, gap)
}

// settle makes the unknown put ops[i] a put that made revision rev.
func settle(ops []porcupine.Operation, i int, rev int64) {
	ops[i].Output = Output{Rev: rev}
	ops[i].Return = returnedBy(ops, rev, ops[i].Call)
}

// candidateHistories returns histories without the ambiguity
// resolveUnknown leaves. With k gaps left, exactly k of the open puts
// made them (each gap one, and only a candidate can have) and the others
// made no revision any operation saw: one history per choice of k open
// puts, the others left out, each chosen one made to return by the
// earliest return of an operation that saw the last gap it can fill (with
// a single gap, it is settled there). The history is linearizable
// exactly when one of them is. It returns nil when that takes more than
// limit histories.
func candidateHistories(ops []porcupine.Operation, limit int) [][]porcupine.Operation {
	out, gaps, open := resolveUnknown(ops)
	k := len(gaps)
	if len(open) == 0 || k > len(open) {
		return [][]porcupine.Operation{out} // nothing open, or too few puts for the gaps: illegal as it is
	}
	if choose(len(open), k) > limit {
		return nil
	}
	var all [][]porcupine.Operation
	pick := make([]int, k) // indexes into open, increasing
	for i := range pick {
		pick[i] = i
	}
	for {
		chosen := map[int]bool{}
		for _, p := range pick {
			chosen[open[p]] = true
		}
		var h []porcupine.Operation
		for i, op := range out {
			if !chosen[i] && slices.Contains(open, i) {
				continue // made no revision anyone saw
			}
			h = append(h, op)
			if !chosen[i] {
				continue
			}
			j := len(h) - 1
			if k == 1 {
				settle(h, j, gaps[0])
				continue
			}
			for g := len(gaps) - 1; g >= 0; g-- {
				if canFill(out, i, gaps[g]) {
					h[j].Return = returnedBy(out, gaps[g], op.Call)
					break
				}
			}
		}
		all = append(all, h)
		// The next choice, in lexicographic order.
		i := k - 1
		for i >= 0 && pick[i] == len(open)-k+i {
			i--
		}
		if i < 0 {
			return all
		}
		pick[i]++
		for j := i + 1; j < k; j++ {
			pick[j] = pick[j-1] + 1
		}
	}
}

// choose is n choose k, saturating above 1<<30.
func choose(n, k int) int {
	c := 1
	for i := 0; i < k; i++ {
		c = c * (n - i) / (i + 1)
		if c > 1<<30 {
			return 1 << 30
		}
	}
	return c
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
