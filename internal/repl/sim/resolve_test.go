package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestResolveUnknownKeepsVerdicts: settling unknown puts from the history
// changes no verdict. Each case is checked as recorded; the resolution
// is what Check runs.
func TestResolveUnknownKeepsVerdicts(t *testing.T) {
	put := func(k, v string) Input { return Input{Put: true, Key: k, Value: v} }
	get := func(k string) Input { return Input{Key: k} }
	unknown := Output{Unknown: true}
	cases := []struct {
		name string
		add  func(h *History)
		want string
	}{
		{"an unknown put seen by a later read", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 2, Found: true, Value: "v2", ModRev: 2})
		}, ""},
		{"an unknown put seen before it was called", func(h *History) {
			h.Add(0, 0, 10, get("k"), Output{Rev: 1, Found: true, Value: "v2", ModRev: 1})
			h.Add(1, 20, 0, put("k", "v2"), unknown)
		}, "not-linearizable"},
		{"two reads that place one unknown put at two revisions", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("j", "v2"), unknown)
			h.Add(2, 20, 30, get("j"), Output{Rev: 2, Found: true, Value: "v2", ModRev: 2})
			h.Add(2, 40, 50, get("j"), Output{Rev: 2, Found: true, Value: "v2", ModRev: 1})
		}, "not-linearizable"},
		{"a read that misses a put acknowledged before it, beside an unknown put", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("j", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 1})
		}, "not-linearizable"},
		{"an unknown put nobody saw, every revision accounted for", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 1, Found: true, Value: "v1", ModRev: 1})
		}, ""},
		{"an unknown put nobody saw that must fill a revision", func(h *History) {
			h.Add(1, 5, 0, put("j", "v2"), unknown)
			h.Add(0, 6, 10, put("k", "v1"), Output{Rev: 2})
			h.Add(2, 20, 30, get("j"), Output{Rev: 2})
		}, "not-linearizable"}, // j was written at revision 1, so the read must find it
		{"an unknown put nobody saw that fills a revision", func(h *History) {
			h.Add(1, 5, 0, put("j", "v2"), unknown)
			h.Add(0, 6, 10, put("k", "v1"), Output{Rev: 2})
			h.Add(2, 20, 30, get("k"), Output{Rev: 2, Found: true, Value: "v1", ModRev: 2})
		}, ""},
		{"a gap two unknown puts may have made", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 2})
			h.Add(2, 20, 30, get("x"), Output{Rev: 2, Found: true, Value: "c", ModRev: 2})
		}, ""},
		{"a stale read beside a gap two unknown puts may have made", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 2})
			h.Add(2, 20, 30, get("x"), Output{Rev: 1})
		}, "not-linearizable"},
		{"two gaps three unknown puts may have made", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(3, 2, 0, put("i", "d"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 3})
			h.Add(2, 20, 30, get("x"), Output{Rev: 3, Found: true, Value: "c", ModRev: 3})
		}, ""},
		{"a stale read beside two gaps three unknown puts may have made", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(3, 2, 0, put("i", "d"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 3})
			h.Add(2, 20, 30, get("x"), Output{Rev: 2})
		}, "not-linearizable"},
		{"two gaps, and only one unknown put unwritten-checked out of three", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(3, 2, 0, put("i", "d"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 3})
			h.Add(2, 20, 30, get("k"), Output{Rev: 3}) // k unwritten
			h.Add(2, 40, 50, get("j"), Output{Rev: 3}) // j unwritten: only i is left for two gaps
		}, "not-linearizable"},
		{"a gap neither unknown put can have made", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 2})
			h.Add(2, 20, 30, get("k"), Output{Rev: 2}) // k unwritten at 2
			h.Add(2, 40, 50, get("j"), Output{Rev: 2}) // nor j: nobody made revision 1
		}, "not-linearizable"},
	}
	for _, c := range cases {
		var h History
		c.add(&h)
		if kind, why := h.Check(0); kind != c.want {
			t.Errorf("%s: verdict %q (%s), want %q", c.name, kind, why, c.want)
		}
		// Porcupine on the history as recorded agrees.
		if raw := porcupine.CheckOperations(Model(), h.ops); raw != (c.want == "") {
			t.Errorf("%s: porcupine on the raw history says linearizable=%v, want %q", c.name, raw, c.want)
		}
	}
}

// TestResolveUnknownSettlesSeenPuts: a history whose unknown puts were all
// seen by reads, or were followed by no revision left unexplained, has no
// open operation left for porcupine to place.
func TestResolveUnknownSettlesSeenPuts(t *testing.T) {
	var h History
	rev := int64(0)
	for i := range 40 {
		at := int64(i) * 100
		v := "v" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		rev++
		h.Add(0, at, 0, Input{Put: true, Key: "k", Value: v}, Output{Unknown: true})
		h.Add(1, at+10, at+20, Input{Key: "k"}, Output{Rev: rev, Found: true, Value: v, ModRev: rev})
		h.Add(2, at+30, 0, Input{Put: true, Key: "j", Value: "x" + v}, Output{Unknown: true}) // never seen
	}
	ops, _, _ := resolveUnknown(h.ops)
	for _, op := range ops {
		if op.Output.(Output).Unknown {
			t.Fatalf("left open: %+v", op)
		}
	}
	if len(ops) != 80 {
		t.Fatalf("%d operations after resolving, want the 40 reads and the 40 puts they saw", len(ops))
	}
	if kind, why := h.Check(0); kind != "" {
		t.Fatalf("%s: %s", kind, why)
	}
}

// TestCandidateHistories: a gap that two unknown puts may have made gives
// one history per candidate, each without open operations; two gaps that
// three may have made give one history per pair, bounded in time.
func TestCandidateHistories(t *testing.T) {
	var h History
	h.Add(0, 0, 0, Input{Put: true, Key: "k", Value: "a"}, Output{Unknown: true})
	h.Add(1, 1, 0, Input{Put: true, Key: "j", Value: "b"}, Output{Unknown: true})
	h.Add(2, 5, 10, Input{Put: true, Key: "x", Value: "c"}, Output{Rev: 2})
	hs := candidateHistories(h.ops, 8)
	if len(hs) != 2 {
		t.Fatalf("%d histories, want one per candidate (2)", len(hs))
	}
	for i, ops := range hs {
		if len(ops) != 2 {
			t.Fatalf("history %d holds %d operations, want the known put and one candidate", i, len(ops))
		}
		for _, op := range ops {
			if op.Output.(Output).Unknown {
				t.Fatalf("history %d leaves %+v open", i, op)
			}
		}
	}
	if hs := candidateHistories(h.ops, 1); hs != nil {
		t.Fatalf("over the limit: %d histories, want nil", len(hs))
	}
	// Two gaps, three candidates: one history per pair of them, in
	// which both return by the time revision 2 was seen.
	var g History
	g.Add(0, 0, 0, Input{Put: true, Key: "k", Value: "a"}, Output{Unknown: true})
	g.Add(1, 1, 0, Input{Put: true, Key: "j", Value: "b"}, Output{Unknown: true})
	g.Add(3, 2, 0, Input{Put: true, Key: "i", Value: "d"}, Output{Unknown: true})
	g.Add(2, 5, 10, Input{Put: true, Key: "x", Value: "c"}, Output{Rev: 3})
	hs = candidateHistories(g.ops, 8)
	if len(hs) != 3 {
		t.Fatalf("%d histories, want one per pair of the three candidates (3)", len(hs))
	}
	for i, ops := range hs {
		if len(ops) != 3 {
			t.Fatalf("history %d holds %d operations, want the known put and two candidates", i, len(ops))
		}
		for _, op := range ops {
			if op.Return > 10 {
				t.Fatalf("history %d: %+v may return after revision 3 was seen (at 10)", i, op)
			}
		}
	}
}

// TestResolveAgreesWithPorcupine compares Check with porcupine on the
// history as recorded, for short simulated runs (histories with unknown
// puts) and for copies of them with one reply altered (most of which no
// longer linearize). Neither verdict may differ.
func TestResolveAgreesWithPorcupine(t *testing.T) {
	cfg := Config{Duration: 8 * time.Second, Settle: 8 * time.Second}
	rng := rand.New(rand.NewPCG(7, 7))
	compared, illegal, withUnknown := 0, 0, 0
	for seed := uint64(1); seed <= 40; seed++ {
		r := Run(Generate(seed, cfg), cfg)
		if len(r.History) == 0 {
			continue
		}
		variants := [][]porcupine.Operation{r.History}
		for range 3 {
			v := append([]porcupine.Operation(nil), r.History...)
			i := rng.IntN(len(v))
			o := v[i].Output.(Output)
			if o.Unknown {
				continue
			}
			switch rng.IntN(3) {
			case 0:
				o.Rev += int64(rng.IntN(3)) - 1
			case 1:
				o.ModRev += int64(rng.IntN(3)) - 1
			default:
				o.Found = !o.Found
			}
			v[i].Output = o
			variants = append(variants, v)
		}
		for _, ops := range variants {
			h := History{ops: ops}
			raw := porcupine.CheckOperationsTimeout(Model(), ops, 20*time.Second)
			if raw == porcupine.Unknown {
				continue // porcupine alone cannot tell: nothing to compare
			}
			kind, why := h.Check(0)
			if (kind == "") != (raw == porcupine.Ok) {
				t.Fatalf("seed %d: Check says %q (%s), porcupine on the raw history %s", seed, kind, why, raw)
			}
			compared++
			if raw == porcupine.Illegal {
				illegal++
			}
			if h.Unknown() > 0 {
				withUnknown++
			}
		}
	}
	if illegal == 0 || withUnknown == 0 || compared == illegal {
		t.Fatalf("compared %d histories (%d illegal, %d with unknown puts): the comparison needs both verdicts and unknown puts", compared, illegal, withUnknown)
	}
	t.Logf("compared %d histories: %d illegal, %d with unknown puts", compared, illegal, withUnknown)
}
