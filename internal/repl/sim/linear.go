package sim

import (
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// A compact form of the store's porcupine model, for speed. Porcupine
// compares a candidate state with every cached state of the same
// linearized set; with Model's map states each comparison walks two maps,
// and that walk was most of a simulator run. Here keys and values are
// interned to small integers once per history, so a state is a flat
// comparable array: Step copies it, Equal is ==, and Hash lets porcupine
// skip most comparisons.
//
// The check is exact, not weaker: interning is a bijection between the
// history's strings and the integers, and the step function is Model's,
// rule for rule. TestCompactModelAgrees runs both on the same histories.

// compactKeys is the most keys the compact model holds; a history with
// more goes through Model.
const compactKeys = 8

type compactIn struct {
	put bool
	key uint8
	val uint32 // interned value (puts), from 1
}

type compactOut struct {
	unknown bool
	found   bool
	val     uint32 // interned value, 0 when not found
	rev     int64
	modRev  int64
}

type compactKV struct {
	val uint32 // 0: absent
	mod int64
}

// compactState is a value: Step returns a changed copy.
type compactState struct {
	rev int64
	kv  [compactKeys]compactKV
}

func compactModel() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return compactState{} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(compactState), input.(compactIn), output.(compactOut)
			if in.put {
				s.rev++
				s.kv[in.key] = compactKV{val: in.val, mod: s.rev}
				return out.unknown || out.rev == s.rev, s
			}
			if out.unknown {
				return true, s
			}
			kv := s.kv[in.key]
			found := kv.val != 0
			return out.rev == s.rev && found == out.found && (!found || kv.val == out.val && kv.mod == out.modRev), s
		},
		Equal: func(a, b any) bool { return a.(compactState) == b.(compactState) },
		Hash: func(state any) uint64 {
			s := state.(compactState)
			h := uint64(s.rev) * 0x9e3779b97f4a7c15
			for _, kv := range s.kv {
				h = (h ^ uint64(kv.val) ^ uint64(kv.mod)<<32) * 0x100000001b3
			}
			return h
		},
	}
}

// compactHistory interns ops' keys and values; ok is false when the
// history does not fit the compact model (more than compactKeys keys).
func compactHistory(ops []porcupine.Operation) (out []porcupine.Operation, ok bool) {
	keys := map[string]uint8{}
	vals := map[string]uint32{}
	val := func(v string) uint32 {
		id, seen := vals[v]
		if !seen {
			id = uint32(len(vals) + 1)
			vals[v] = id
		}
		return id
	}
	out = make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		in, o := op.Input.(Input), op.Output.(Output)
		k, seen := keys[in.Key]
		if !seen {
			if len(keys) == compactKeys || len(vals) >= math.MaxUint32-1 {
				return nil, false
			}
			k = uint8(len(keys))
			keys[in.Key] = k
		}
		ci := compactIn{put: in.Put, key: k}
		if in.Put {
			ci.val = val(in.Value)
		}
		co := compactOut{unknown: o.Unknown, found: o.Found, rev: o.Rev, modRev: o.ModRev}
		if o.Found {
			co.val = val(o.Value)
		}
		op.Input, op.Output = ci, co
		out[i] = op
	}
	return out, true
}

// checkLinearizable runs porcupine over ops with the compact model when
// the history fits it, else with Model (timeout 0: no limit).
func checkLinearizable(ops []porcupine.Operation, timeout time.Duration) porcupine.CheckResult {
	if c, ok := compactHistory(ops); ok {
		return porcupine.CheckOperationsTimeout(compactModel(), c, timeout)
	}
	return porcupine.CheckOperationsTimeout(Model(), ops, timeout)
}
