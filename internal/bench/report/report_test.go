package report

import (
	"math"
	"strings"
	"testing"

	"github.com/dyad-db/dyad/internal/bench/workload"
)

func res(op workload.Op, clients int, thr, p50, p99 float64) workload.Result {
	return workload.Result{Op: op, Clients: clients, Ops: 100, Throughput: thr, P50US: p50, P90US: p50, P99US: p99, P999US: p99, MaxUS: p99}
}

func sample() *Report {
	return &Report{Targets: []Target{
		{Name: "dyad", Results: []workload.Result{res(workload.Put, 1, 200, 500, 1000), res(workload.RangeS, 1, 900, 100, 300)}},
		{Name: "etcd-3", Results: []workload.Result{res(workload.Put, 1, 100, 1000, 4000), res(workload.RangeS, 1, 300, 200, 600)}},
		{Name: "kine-pg", Results: []workload.Result{res(workload.Put, 1, 400, 250, 500),
			{Op: workload.RangeS, Clients: 1, Unsupported: "serializable is not implemented by kine"}}},
	}}
}

// TestRatios checks each ratio is dyad's figure over the baseline's from the
// same cell, and that an unsupported baseline gives no number but a reason.
func TestRatios(t *testing.T) {
	r := sample()
	put := r.Ratios("dyad", r.Targets[0].Results[0])
	if len(put) != 2 || put[0].Baseline != "etcd-3" || put[1].Baseline != "kine-pg" {
		t.Fatalf("baselines: %+v", put)
	}
	if put[0].Lat != 0.5 || put[0].Tail != 0.25 || put[0].Thr != 2 {
		t.Errorf("vs etcd-3: %+v, want lat 0.5 tail 0.25 thr 2", put[0])
	}
	if put[1].Lat != 2 || put[1].Tail != 2 || put[1].Thr != 0.5 {
		t.Errorf("vs kine-pg: %+v, want lat 2 tail 2 thr 0.5", put[1])
	}
	rs := r.Ratios("dyad", r.Targets[0].Results[1])
	if !math.IsNaN(rs[1].Lat) || !strings.Contains(rs[1].Why, "unsupported") {
		t.Errorf("vs kine-pg on an unsupported op: %+v, want NaN and a reason", rs[1])
	}
}

// TestMarkdownUnsupported checks an unsupported cell reads "unsupported" in
// the baseline's table and gives "—" ratios in dyad's, never a zero.
func TestMarkdownUnsupported(t *testing.T) {
	md := markdownOf(t, sample())
	if !strings.Contains(md, "| range-s | 1 | unsupported |") {
		t.Errorf("kine-pg's range-s is not shown as unsupported:\n%s", md)
	}
	if !strings.Contains(md, "| range-s | 1 | 900 | 100 µs | 100 µs | 300 µs | 300 µs | 0 | 0.50× | 0.50× | 3.00× | — | — | — |") {
		t.Errorf("dyad's range-s row lacks its ratios:\n%s", md)
	}
}

// TestHeadline checks the headline table: latency at one client and the best
// throughput over the client counts, with dyad ÷ baseline ratios, and "—"
// where a figure is missing.
func TestHeadline(t *testing.T) {
	r := sample()
	r.Targets[0].Results = append(r.Targets[0].Results, res(workload.Put, 8, 600, 900, 2000))
	r.Targets[1].Results = append(r.Targets[1].Results, res(workload.Put, 8, 150, 3000, 9000))
	var b strings.Builder
	if err := Headline(r).Markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| figure | dyad | etcd-3 | kine-pg | dyad ÷ etcd-3 | dyad ÷ kine-pg |",
		"| write latency p50 (put, 1 client) | 500 µs | 1.00 ms | 250 µs | 0.50× | 2.00× |",
		"| throughput, best over clients (put) | 600/s | 150/s | 400/s | 4.00× | 1.50× |",
		"| read latency p50 (range-l, 1 client) | — | — | — | — | — |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("headline lacks %q:\n%s", want, md)
		}
	}
}

// A cell that pools rounds shows their throughput's range beside the
// pooled figure; a single run shows the figure alone.
func TestMarkdownRoundsRange(t *testing.T) {
	r := sample()
	pooled := res(workload.Put, 64, 7000, 800, 2000)
	pooled.RoundsOpsPerS = []float64{7400, 6100, 7600}
	r.Targets[0].Results = append(r.Targets[0].Results, pooled)
	md := markdownOf(t, r)
	if !strings.Contains(md, "| put | 64 | 7000 (6100–7600) | 800 µs |") {
		t.Errorf("the pooled cell lacks its rounds' range:\n%s", md)
	}
	if !strings.Contains(md, "| put | 1 | 200 | 500 µs |") {
		t.Errorf("a single run's cell is not shown alone:\n%s", md)
	}
}

// markdownOf renders r's Markdown report.
func markdownOf(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
