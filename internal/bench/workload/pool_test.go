package workload

import (
	"math"
	"slices"
	"testing"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// roundOf is one round's result: n requests of latency us each over
// elapsed seconds.
func roundOf(n int, us int64, elapsed float64) Result {
	h := hdrhistogram.New(histMinUS, histMaxUS, histSig)
	for range n {
		if err := h.RecordValue(us); err != nil {
			panic(err)
		}
	}
	return Result{Op: Put, Clients: 64, Ops: int64(n), Elapsed: elapsed, Throughput: float64(n) / elapsed,
		P50US: float64(us), P99US: float64(us), MeanUS: float64(us), MaxUS: float64(us), Hist: h.Export()}
}

// Pool reads several rounds as one run: percentiles over every request
// of every round, throughput over all measured time, each round's
// throughput kept.
func TestPoolTreatsRoundsAsOneRun(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= b*0.002 } // the histogram's resolution
	cases := []struct {
		name           string
		rounds         []Result
		p50, p99, tput float64
		perRound       []float64
	}{
		{"one round as it is", []Result{roundOf(100, 500, 1)}, 500, 500, 100, nil},
		{"fast round and slow round", []Result{roundOf(150, 100, 1), roundOf(50, 1000, 1)}, 100, 1000, 100, []float64{150, 50}},
		{"slow majority", []Result{roundOf(40, 100, 1), roundOf(160, 1000, 3)}, 1000, 1000, 50, []float64{40, 160.0 / 3}},
		{"three even rounds", []Result{roundOf(100, 200, 2), roundOf(100, 200, 2), roundOf(100, 200, 2)}, 200, 200, 50, []float64{50, 50, 50}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Pool(tc.rounds)
			if !near(p.P50US, tc.p50) || !near(p.P99US, tc.p99) {
				t.Errorf("p50 %.0f p99 %.0f µs, want %.0f and %.0f", p.P50US, p.P99US, tc.p50, tc.p99)
			}
			if !near(p.Throughput, tc.tput) {
				t.Errorf("throughput %.2f/s, want %.2f", p.Throughput, tc.tput)
			}
			var ops int64
			for _, r := range tc.rounds {
				ops += r.Ops
			}
			if p.Ops != ops || p.Histogram().TotalCount() != ops {
				t.Errorf("%d requests, histogram of %d, want %d", p.Ops, p.Histogram().TotalCount(), ops)
			}
			if !slices.EqualFunc(p.RoundsOpsPerS, tc.perRound, near) {
				t.Errorf("rounds' throughput %v, want %v", p.RoundsOpsPerS, tc.perRound)
			}
		})
	}
}

// A round that found the operation unsupported makes the pool so.
func TestPoolKeepsUnsupported(t *testing.T) {
	p := Pool([]Result{roundOf(10, 100, 1), {Op: Put, Clients: 64, Unsupported: "no"}})
	if p.Unsupported != "no" || p.Ops != 0 {
		t.Fatalf("pool %+v, want the round's Unsupported and nothing else", p)
	}
}
