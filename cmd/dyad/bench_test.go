package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/floor"
	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
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

// TestFloorLayouts: the floor measures the layout of every target when
// the run has puts (a name with @<delay> is shaped), the delay profile's
// delays when it runs on dyad-pair or etcd-3, each once.
func TestFloorLayouts(t *testing.T) {
	const ms = time.Millisecond
	put := []workload.Op{workload.Put, workload.RangeL}
	tests := []struct {
		name    string
		targets []string
		ops     []workload.Op
		delay   bool
		delays  []time.Duration
		want    []floor.Layout
	}{
		{"raw put", []string{"dyad", "dyad-pair", "etcd-1", "etcd-3"}, put, false, nil, []floor.Layout{floor.Direct}},
		{"no put, no delay", []string{"dyad-pair"}, []workload.Op{workload.RangeL}, false, nil, nil},
		{"shaped targets", []string{"dyad-pair@2ms", "etcd-3@2ms", "dyad"}, put, false, nil,
			[]floor.Layout{floor.Shaped(2 * ms), floor.Direct}},
		{"delay profile", []string{"dyad-pair", "etcd-3"}, nil, true, []time.Duration{0, ms / 2, 2 * ms},
			[]floor.Layout{floor.Shaped(0), floor.Shaped(ms / 2), floor.Shaped(2 * ms)}},
		{"delay profile without its systems", []string{"dyad", "etcd-1"}, nil, true, []time.Duration{2 * ms}, nil},
		{"both", []string{"dyad-pair"}, put, true, []time.Duration{2 * ms},
			[]floor.Layout{floor.Direct, floor.Shaped(2 * ms)}},
	}
	for _, tc := range tests {
		got := floorLayouts(tc.targets, tc.ops, tc.delay, tc.delays)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestHumanBytes: sizes print in the largest binary unit below them.
func TestHumanBytes(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{5 << 20, "5.0 MiB"},
		{53 << 29, "26.5 GiB"},
	} {
		if got := humanBytes(c.n); got != c.want {
			t.Errorf("humanBytes(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}

// TestDiskUsage: a kept work directory's size counts the regular files
// of every level under it, and nothing else.
func TestDiskUsage(t *testing.T) {
	dir := t.TempDir()
	write := func(rel string, n int) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.log", 100)
	write("round0/dyad/member/snap/db", 4096)
	write("round1/etcd-3/m1/wal/0.wal", 7)
	if err := os.Symlink(filepath.Join(dir, "a.log"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if got, want := diskUsage(dir), int64(100+4096+7); got != want {
		t.Errorf("diskUsage = %d, want %d", got, want)
	}
}
