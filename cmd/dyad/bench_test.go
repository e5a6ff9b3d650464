package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
)

// TestChainExtras: the chained extras run in turn on a target they apply
// to (expected time above 0), skip one that does not, add up their
// expected times, report progress as shares of the whole, and join errors.
func TestChainExtras(t *testing.T) {
	var ran []string
	var fracs []float64
	mk := func(name string, d time.Duration, err error) extraBench {
		return extraBench{
			run: func(_ context.Context, _ target.Target, _ []string, _ *report.Report, progress func(string, float64)) error {
				ran = append(ran, name)
				progress(name, 1)
				return err
			},
			expected: func(target.Target) time.Duration { return d },
		}
	}
	boom := errors.New("boom")
	run, expected := chainExtras([]extraBench{mk("a", time.Second, nil), mk("none", 0, nil), mk("b", 3*time.Second, boom)})
	if got := expected(nil); got != 4*time.Second {
		t.Fatalf("expected %v, want 4s", got)
	}
	err := run(context.Background(), nil, nil, &report.Report{}, func(_ string, f float64) { fracs = append(fracs, f) })
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
	if len(ran) != 2 || ran[0] != "a" || ran[1] != "b" {
		t.Fatalf("ran %v, want [a b]", ran)
	}
	if len(fracs) != 2 || fracs[0] != 0.25 || fracs[1] != 1 {
		t.Fatalf("progress %v, want [0.25 1]", fracs)
	}
}
