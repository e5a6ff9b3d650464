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
// linearizable after them exactly when it was before:
//   - Every put writes a value of its own (v<op ID>), and each put makes
//     exactly one revision. A read that returned a put's value with mod
//     revision m saw that put take effect at m: the put becomes a put
//     that returned revision m (a second read that disagrees still fails
//     the model).
//   - Such a put took effect before every operation whose header revision
//     is m or more (the store's revision reaches m only through it), so
//     it returned no later than the earliest of those returned.
//   - If every revision up to the highest one any operation saw is made
//     by a put whose revision is known, an unknown put that no read saw
//     took no revision that any operation could observe: it either never
//     happened or happened after everything recorded. Either way it
//     changes no outcome, and it is left out.
//
// It returns a new slice; ops is not changed.
func resolveUnknown(ops []porcupine.Operation) []porcupine.Operation {
	out := append([]porcupine.Operation(nil), ops...)
	unknown := map[string]int{} // value -> index in out of the unknown put that wrote it
	for i, op := range out {
		if op.Input.(Input).Put && op.Output.(Output).Unknown {
			unknown[op.Input.(Input).Value] = i
		}
	}
	if len(unknown) == 0 {
		return out
	}
	made := map[int64]bool{} // revisions whose put is known
	var seen int64           // the highest revision any operation saw
	for _, op := range out {
		in, o := op.Input.(Input), op.Output.(Output)
		if o.Unknown {
			continue
		}
		seen = max(seen, o.Rev)
		if in.Put {
			made[o.Rev] = true
		}
	}
	resolved := map[int]bool{}
	for _, op := range out {
		in, o := op.Input.(Input), op.Output.(Output)
		if in.Put || o.Unknown || !o.Found {
			continue
		}
		i, ok := unknown[o.Value]
		if !ok || resolved[i] || out[i].Input.(Input).Key != in.Key {
			continue
		}
		resolved[i] = true
		made[o.ModRev] = true
		out[i].Output = Output{Rev: o.ModRev}
		out[i].Return = returnedBy(out, o.ModRev, out[i].Call)
	}
	for r := int64(1); r <= seen; r++ {
		if !made[r] {
			return out // a revision nobody accounts for: keep every unknown put
		}
	}
	kept := out[:0]
	for i, op := range out {
		if _, isUnknown := unknown[op.Input.(Input).Value]; isUnknown && op.Input.(Input).Put && !resolved[i] && op.Output.(Output).Unknown {
			continue
		}
		kept = append(kept, op)
	}
	return kept
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
