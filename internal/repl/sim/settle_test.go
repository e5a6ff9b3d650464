package sim

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestCheckSettledCases: each history is checked with its unknown puts
// settled from the final log (truth), and by the search that does not
// know the log (Check). The settled verdict is the one wanted; where the
// two differ, the log contradicts the only placements that would make
// the history linearizable, and the settled check is the stronger.
func TestCheckSettledCases(t *testing.T) {
	put := func(k, v string) Input { return Input{Put: true, Key: k, Value: v} }
	get := func(k string) Input { return Input{Key: k} }
	unknown := Output{Unknown: true}
	cases := []struct {
		name        string
		add         func(h *History)
		truth       Truth
		want, other string // the settled verdict, Check's
	}{
		{"an unknown put seen by a later read, in the log there", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 2, Found: true, Value: "v2", ModRev: 2})
		}, Truth{"v1": {"k", 1}, "v2": {"k", 2}}, "", ""},
		{"a read that saw a value the log lost", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 2, Found: true, Value: "v2", ModRev: 2})
		}, Truth{"v1": {"k", 1}}, "not-linearizable", ""},
		{"a read that saw a value at another revision than the log's", func(h *History) {
			h.Add(1, 0, 0, put("k", "v1"), unknown)
			h.Add(1, 1, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 2, Found: true, Value: "v2", ModRev: 2})
		}, Truth{"v2": {"k", 1}, "v1": {"k", 2}}, "not-linearizable", ""},
		{"an unknown put the log never took, nobody saw", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 1, Found: true, Value: "v1", ModRev: 1})
		}, Truth{"v1": {"k", 1}}, "", ""},
		{"an unknown put the log took after everything seen", func(h *History) {
			h.Add(0, 0, 10, put("k", "v1"), Output{Rev: 1})
			h.Add(1, 5, 0, put("k", "v2"), unknown)
			h.Add(2, 20, 30, get("k"), Output{Rev: 1, Found: true, Value: "v1", ModRev: 1})
		}, Truth{"v1": {"k", 1}, "v2": {"k", 2}}, "", ""},
		{"the log's put fills a gap, but a read shows its key unwritten there", func(h *History) {
			h.Add(1, 0, 0, put("j", "v1"), unknown)
			h.Add(0, 1, 10, put("k", "v2"), Output{Rev: 2})
			h.Add(2, 20, 30, get("j"), Output{Rev: 2})
		}, Truth{"v1": {"j", 1}, "v2": {"k", 2}}, "not-linearizable", "not-linearizable"},
		{"the log's put made a revision seen before the put was called", func(h *History) {
			h.Add(0, 0, 10, get("k"), Output{Rev: 1})
			h.Add(1, 20, 0, put("k", "v1"), unknown)
		}, Truth{"v1": {"k", 1}}, "not-linearizable", "not-linearizable"},
		{"two unknown puts for one gap, the log names one", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 2})
			h.Add(2, 20, 30, get("x"), Output{Rev: 2, Found: true, Value: "c", ModRev: 2})
		}, Truth{"b": {"j", 1}, "c": {"x", 2}}, "", ""},
		{"the log names the put a read shows unwritten, the other could have filled the gap", func(h *History) {
			h.Add(0, 0, 0, put("k", "a"), unknown)
			h.Add(1, 1, 0, put("j", "b"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 2})
			h.Add(2, 20, 30, get("j"), Output{Rev: 2})
		}, Truth{"b": {"j", 1}, "c": {"x", 2}}, "not-linearizable", ""},
		{"a value in the log under another key", func(h *History) {
			h.Add(1, 0, 0, put("k", "a"), unknown)
			h.Add(2, 5, 10, put("x", "c"), Output{Rev: 2})
		}, Truth{"a": {"j", 1}, "c": {"x", 2}}, "not-linearizable", ""},
	}
	for _, c := range cases {
		var h History
		c.add(&h)
		if kind, why := h.CheckSettled(c.truth, 0); kind != c.want {
			t.Errorf("%s: settled verdict %q (%s), want %q", c.name, kind, why, c.want)
		}
		if kind, why := h.Check(0); kind != c.other {
			t.Errorf("%s: the search's verdict %q (%s), want %q", c.name, kind, why, c.other)
		}
	}
}

// TestCheckSettledAgreesWithSearch takes histories whose outcomes are all
// known (short simulated runs, their unknown puts settled from their own
// final log, and copies with one reply altered), blinds some known puts
// (their outcome becomes unknown; the truth keeps the revisions the
// history says they made), and compares three verdicts: porcupine on the
// known history, the settled check of the blinded one, and the search
// (Check) over the blinded one. Blinding drops what the client learnt,
// so it may turn an illegal history legal, but never the reverse; the
// settled check may only be stronger than the search. So:
//   - known linearizable => settled linearizable (it never fails a
//     history that has a linearization agreeing with the log);
//   - settled linearizable => search linearizable (it never accepts what
//     the search rejects).
func TestCheckSettledAgreesWithSearch(t *testing.T) {
	cfg := Config{Duration: 8 * time.Second, Settle: 8 * time.Second, Extended: true}
	rng := rand.New(rand.NewPCG(16, 16))
	compared, illegal, lostByBlinding, stronger := 0, 0, 0, 0
	for seed := uint64(1); seed <= 30; seed++ {
		r := Run(Generate(seed, cfg), cfg)
		if r.Truth == nil || len(r.History) == 0 {
			continue // not judged by porcupine (a split brain, a failure)
		}
		known := settleFromTruth(r.History, r.Truth)
		if !porcupine.CheckOperations(Model(), known) {
			t.Fatalf("seed %d: the run's own history, settled from its log, is not linearizable", seed)
		}
		for variant := range 8 {
			k := append([]porcupine.Operation(nil), known...)
			altered := -1
			if variant > 0 {
				altered = rng.IntN(len(k))
				o := k[altered].Output.(Output)
				switch rng.IntN(3) {
				case 0:
					o.Rev += int64(rng.IntN(3)) - 1
				case 1:
					o.ModRev += int64(rng.IntN(3)) - 1
				default:
					o.Found = !o.Found
				}
				k[altered].Output = o
			}
			truth := Truth{}
			var puts []int
			for i, op := range k {
				if in := op.Input.(Input); in.Put {
					truth[in.Value] = Written{Key: in.Key, Rev: op.Output.(Output).Rev}
					if i != altered {
						puts = append(puts, i)
					}
				}
			}
			blind := History{ops: append([]porcupine.Operation(nil), k...)}
			for range min(len(puts), 1+rng.IntN(4)) {
				i := puts[rng.IntN(len(puts))]
				// As History.Add records a put of unknown outcome.
				blind.ops[i].Output, blind.ops[i].Return = Output{Unknown: true}, math.MaxInt64
			}
			knownOK := porcupine.CheckOperations(Model(), k)
			settled, why := blind.CheckSettled(truth, 0)
			search, swhy := blind.Check(0)
			if knownOK && settled != "" {
				t.Fatalf("seed %d, variant %d: the known history linearizes, the settled check says %s (%s)", seed, variant, settled, why)
			}
			if settled == "" && search != "" {
				t.Fatalf("seed %d, variant %d: the settled check accepts what the search rejects (%s: %s)", seed, variant, search, swhy)
			}
			compared++
			switch {
			case settled != "":
				illegal++
			case !knownOK:
				lostByBlinding++
			}
			if settled != "" && search == "" {
				stronger++
			}
		}
	}
	if compared == 0 || illegal == 0 || illegal == compared {
		t.Fatalf("compared %d histories, %d illegal: the comparison needs both verdicts", compared, illegal)
	}
	t.Logf("compared %d histories: %d illegal after settling, %d illegal only before blinding, %d where the log rejected the search's placement",
		compared, illegal, lostByBlinding, stronger)
}
