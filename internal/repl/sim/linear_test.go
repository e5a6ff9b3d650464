package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/anishathalye/porcupine"
)

// TestCompactModelAgrees checks the compact model against Model on the
// histories of short runs and on copies with one output changed: both
// models find the same histories linearizable, and at least some of the
// changed ones illegal (else the comparison proves nothing).
func TestCompactModelAgrees(t *testing.T) {
	cfg := Config{}
	rng := rand.New(rand.NewPCG(7, 7))
	illegal := 0
	for seed := uint64(1); seed <= 8; seed++ {
		r := Run(Generate(seed, cfg), cfg)
		if len(r.History) == 0 {
			continue
		}
		hists := [][]porcupine.Operation{r.History}
		for range 3 {
			h := append([]porcupine.Operation(nil), r.History...)
			i := rng.IntN(len(h))
			out := h[i].Output.(Output)
			switch rng.IntN(3) {
			case 0:
				out.Rev++
			case 1:
				out.ModRev++
			default:
				out.Found, out.Value = !out.Found, "v0"
			}
			out.Unknown = false
			h[i].Output = out
			hists = append(hists, h)
		}
		for j, h := range hists {
			c, ok := compactHistory(h)
			if !ok {
				t.Fatalf("seed %d: a history of %d keys does not fit the compact model", seed, cfg.withDefaults().Keys)
			}
			want := porcupine.CheckOperations(Model(), h)
			if got := porcupine.CheckOperations(compactModel(), c); got != want {
				t.Fatalf("seed %d, history %d: compact model says linearizable=%v, Model says %v", seed, j, got, want)
			}
			if !want {
				illegal++
			}
		}
	}
	if illegal == 0 {
		t.Fatal("no changed history was illegal: the comparison proves nothing")
	}
	t.Logf("%d illegal histories found by both models", illegal)
}

// TestCompactHistoryFallsBack: a history with more keys than the compact
// model holds is not converted (checkLinearizable then uses Model).
func TestCompactHistoryFallsBack(t *testing.T) {
	var h History
	for k := range compactKeys + 1 {
		h.Add(0, int64(2*k), int64(2*k+1), Input{Put: true, Key: string(rune('a' + k)), Value: "x"}, Output{Rev: int64(k + 1)})
	}
	if _, ok := compactHistory(h.ops); ok {
		t.Fatalf("%d keys fit a compact model of %d", compactKeys+1, compactKeys)
	}
	if res := checkLinearizable(h.ops, 0); res != porcupine.Ok {
		t.Fatalf("a sequential history of puts is %v", res)
	}
}
