package bench

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench"
	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// TestBenchSmoke runs every raw operation kind and three Kubernetes-shaped ones with 1 and 4 clients for a
// fraction of a second on dyad and etcd-1, then checks the report: the three
// files exist, every cell measured requests without errors, percentiles are
// ordered, and both renderings name both targets.
func TestBenchSmoke(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	etcd := testutil.RequireBinary(t, "etcd-3.6") // fails under DYAD_REQUIRE_PEERS=1
	out := t.TempDir()
	cfg := bench.Config{
		Targets: []string{"dyad", "etcd-1"},
		// Every raw kind, plus the Kubernetes mix (whose setup sends each
		// of its request shapes once), the watch and the pod burst.
		Ops:      append(slices.Clone(workload.AllOps), workload.K8sMix, workload.K8sWatch, workload.PhaseBurst),
		Clients:  []int{1, 4},
		Duration: 300 * time.Millisecond,
		Warmup:   50 * time.Millisecond,
		Seed:     7,
		Out:      out,
		Command:  "smoke test",
		Env: target.Env{Bins: target.Bins{Dyad: dyad, PeersDir: filepath.Dir(etcd)},
			WorkDir: t.TempDir()},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := bench.Run(ctx, cfg); err != nil {
		t.Fatalf("bench.Run: %v", err)
	}
	for _, f := range []string{report.JSONFile, report.MarkdownFile, report.HTMLFile} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s missing or empty: %v", f, err)
		}
	}
	rep, err := report.Load(filepath.Join(out, report.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Targets) != 2 {
		t.Fatalf("report has %d targets, want 2", len(rep.Targets))
	}
	if rep.Machine.Cores <= 0 || rep.Machine.Kernel == "" {
		t.Errorf("machine details missing: %+v", rep.Machine)
	}
	for _, tr := range rep.Targets {
		if tr.Error != "" {
			t.Errorf("%s failed: %s", tr.Name, tr.Error)
			continue
		}
		if tr.Version == "" || strings.Contains(tr.Version, "unknown") {
			t.Errorf("%s: version %q", tr.Name, tr.Version)
		}
		if want := len(cfg.Ops) * len(cfg.Clients); len(tr.Results) != want {
			t.Errorf("%s: %d results, want %d", tr.Name, len(tr.Results), want)
		}
		for _, r := range tr.Results {
			// dyad and etcd implement every kind the bench sends.
			if r.Unsupported != "" {
				t.Errorf("%s %s x%d: unsupported: %s", tr.Name, r.Op, r.Clients, r.Unsupported)
				continue
			}
			if r.Ops <= 0 || r.Throughput <= 0 || r.Errors != 0 {
				t.Errorf("%s %s x%d: ops %d, %.0f/s, %d errors (%s)", tr.Name, r.Op, r.Clients, r.Ops, r.Throughput, r.Errors, r.FirstError)
			}
			if !(r.P50US > 0 && r.P50US <= r.P90US && r.P90US <= r.P99US && r.P99US <= r.P999US && r.P999US <= r.MaxUS) {
				t.Errorf("%s %s x%d: percentiles out of order: p50 %v p90 %v p99 %v p99.9 %v max %v",
					tr.Name, r.Op, r.Clients, r.P50US, r.P90US, r.P99US, r.P999US, r.MaxUS)
			}
			// A round trip on loopback takes well under the cell's length.
			if r.P50US > float64(cfg.Duration.Microseconds()) {
				t.Errorf("%s %s x%d: p50 %v µs exceeds the cell's duration", tr.Name, r.Op, r.Clients, r.P50US)
			}
			if h := r.Histogram(); h == nil || h.TotalCount() != r.Ops {
				t.Errorf("%s %s x%d: histogram does not hold the %d measured requests", tr.Name, r.Op, r.Clients, r.Ops)
			}
		}
	}
	md, _ := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	html, _ := os.ReadFile(filepath.Join(out, report.HTMLFile))
	for _, name := range []string{"dyad", "etcd-1"} {
		if !strings.Contains(string(md), "### "+name) {
			t.Errorf("summary.md has no section for %s", name)
		}
	}
	if n := strings.Count(string(html), "<svg"); n < len(cfg.Ops) {
		t.Errorf("index.html holds %d plots, want at least one per operation (%d)", n, len(cfg.Ops))
	}
}
