package bench

import (
	"context"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// TestWeight: a target's share of the progress bar is its cells' expected
// milliseconds plus the Extra's own estimate (one cell without one).
func TestWeight(t *testing.T) {
	extra := func(context.Context, target.Target, []string, *report.Report, func(string, float64)) error {
		return nil
	}
	ops := []workload.Op{workload.Put, workload.RangeL}
	tests := []struct {
		name string
		cfg  Config
		want targetWeight
	}{
		{"matrix only", Config{Ops: ops, Clients: []int{1, 8}, Duration: 1500 * time.Millisecond, Warmup: 500 * time.Millisecond},
			targetWeight{cells: 4, cell: 2000}},
		{"a count of requests", Config{Ops: ops, Clients: []int{1}, OpCount: 1000},
			targetWeight{cells: 2, cell: 1000}},
		{"extra without an estimate", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Extra: extra},
			targetWeight{cells: 2, cell: 1000, extra: 1000}},
		{"extra with an estimate", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Extra: extra,
			ExtraTime: func(target.Target) time.Duration { return 5 * time.Minute }},
			targetWeight{cells: 2, cell: 1000, extra: 300_000}},
	}
	for _, tt := range tests {
		got := tt.cfg.weight(nil)
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
