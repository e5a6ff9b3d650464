package sim

import "testing"

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
	}
	for _, c := range cases {
		var h History
		c.add(&h)
		if kind, why := h.Check(0); kind != c.want {
			t.Errorf("%s: verdict %q (%s), want %q", c.name, kind, why, c.want)
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
	ops := resolveUnknown(h.ops)
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
