package floor

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/twozone"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// scripted is a clock for Sync: the first reading is t0, and each
// sample's end reading is its start plus the next of durs; other readings
// repeat the last one.
type scripted struct {
	now   time.Time
	durs  []time.Duration
	calls int
}

func (c *scripted) Now() time.Time {
	c.calls++
	// Readings: begin, then start and end per sample.
	if c.calls > 1 && c.calls%2 == 1 && len(c.durs) > 0 {
		c.now = c.now.Add(c.durs[0])
		c.durs = c.durs[1:]
	}
	return c.now
}

// TestSync appends and fdatasyncs on a real temporary directory, times
// each sample by the clock it is given, stops early at Limit (never below
// minSamples), and leaves no file behind.
func TestSync(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	ramp := func(n int, step time.Duration) []time.Duration {
		d := make([]time.Duration, n)
		for i := range d {
			d[i] = time.Duration(i+1) * step
		}
		rand.New(rand.NewPCG(1, 2)).Shuffle(n, func(i, j int) { d[i], d[j] = d[j], d[i] })
		return d
	}
	flat := func(n int, d time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = d
		}
		return out
	}
	tests := []struct {
		name    string
		samples int
		limit   time.Duration
		durs    []time.Duration
		want    report.Dist
	}{
		{"every sample timed", 200, 0, ramp(200, time.Microsecond),
			report.Dist{N: 200, P50: 100 * time.Microsecond, P90: 180 * time.Microsecond, P99: 198 * time.Microsecond, P999: 200 * time.Microsecond, Max: 200 * time.Microsecond}},
		{"limit ends the run", 1000, 150 * time.Millisecond, flat(1000, time.Millisecond),
			report.Dist{N: 150, P50: time.Millisecond, P90: time.Millisecond, P99: time.Millisecond, P999: time.Millisecond, Max: time.Millisecond}},
		{"limit never below the minimum", 1000, 10 * time.Millisecond, flat(1000, time.Millisecond),
			report.Dist{N: minSamples, P50: time.Millisecond, P90: time.Millisecond, P99: time.Millisecond, P999: time.Millisecond, Max: time.Millisecond}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "work", SyncDir)
			clk := &scripted{now: t0, durs: tc.durs}
			got, err := Sync(SyncConfig{Dir: dir, Record: 256, Samples: tc.samples, Limit: tc.limit, Now: clk.Now})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// TestSyncFails: a directory that cannot be made is an error, not an
// empty distribution.
func TestSyncFails(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := Sync(SyncConfig{Dir: filepath.Join(file, SyncDir), Samples: 10}); err == nil {
		t.Fatalf("no error, got %+v", d)
	}
}

func TestLayoutOf(t *testing.T) {
	tests := []struct {
		name string
		want Layout
	}{
		{"dyad", Direct},
		{"dyad-pair", Direct},
		{"dyad-pair@2ms", Shaped(2 * time.Millisecond)},
		{"etcd-3@0.5ms", Shaped(500 * time.Microsecond)},
		{"etcd-3@0s", Shaped(0)},
		{"etcd-3@far", Direct},
	}
	for _, tc := range tests {
		if got := LayoutOf(tc.name); got != tc.want {
			t.Errorf("LayoutOf(%q) = %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// TestCount: far-apart zones get fewer round trips, never fewer than
// minTrips nor more than Samples.
func TestCount(t *testing.T) {
	c := Config{Samples: 1000}
	tests := []struct {
		l    Layout
		want int
	}{
		{Direct, 1000},
		{Shaped(0), 1000},
		{Shaped(500 * time.Microsecond), 1000},
		{Shaped(2 * time.Millisecond), 500},
		{Shaped(50 * time.Millisecond), minTrips},
	}
	for _, tc := range tests {
		if got := c.count(tc.l); got != tc.want {
			t.Errorf("count(%v) = %d, want %d", tc.l, got, tc.want)
		}
	}
}

func put(p50, p99 float64) workload.Result {
	return workload.Result{Op: workload.Put, Clients: 1, Ops: 100, P50US: p50, P99US: p99}
}

// sample is a run with the floor measured in two layouts (and a third
// whose round trip failed), puts on four targets of the matrix and on two
// shaped ones, and the delay profile's rows.
func sample() *Result {
	const ms = time.Millisecond
	rep := &report.Report{Targets: []report.Target{
		{Name: "dyad", Results: []workload.Result{put(450, 900)}},
		{Name: "dyad-pair", Results: []workload.Result{put(600, 1200)}},
		{Name: "etcd-1", Results: []workload.Result{put(300, 600)}},
		{Name: "etcd-3", Results: []workload.Result{put(900, 3000)}},
		{Name: "dyad-pair@2ms", Results: []workload.Result{put(6000, 9000)}},
		{Name: "kine-pg", Results: []workload.Result{{Op: workload.Put, Clients: 1, Unsupported: "no"}}},
	}}
	rep.Extras = map[string]any{twozone.ProfileDelay: &twozone.DelayResult{Rows: []twozone.DelayRow{
		{System: "dyad-pair", Delay: 2 * ms, One: put(6150, 8000)},
		{System: "etcd-3", Delay: 2 * ms, One: put(8200, 12000)},
		{System: "dyad-pair", Delay: 7 * ms, One: put(20000, 30000)},
		{System: "etcd-3", Delay: 7 * ms, Err: "did not start"},
	}}}
	return &Result{Size: 256, Method: "test", RefName: "ddsperf", rep: rep,
		Sync: report.Dist{N: 1000, P50: 100 * time.Microsecond},
		Trips: []Trip{
			{Layout: Direct, RTT: report.Dist{N: 1000, P50: 50 * time.Microsecond}, Ref: report.Dist{N: 9, P50: 20 * time.Microsecond}},
			{Layout: Shaped(2 * ms), RTT: report.Dist{N: 500, P50: 4100 * time.Microsecond}, RefErr: "ddsperf: gone"},
			{Layout: Shaped(7 * ms), Err: "netns: no root"},
		}}
}

// TestPutCells: each put at 1 client is divided by the floor of its own
// layout (fdatasync p50 + that layout's round-trip p50), by the floor
// with the reference's round trip, by the fdatasync alone and by etcd-3's
// put in the same layout and part of the run; what is missing is "—".
func TestPutCells(t *testing.T) {
	r := sample()
	if f, ok := r.Floor(Direct); !ok || f != 150*time.Microsecond {
		t.Fatalf("direct floor %v %v, want 150µs", f, ok)
	}
	if f, ok := r.Floor(Shaped(2 * time.Millisecond)); !ok || f != 4200*time.Microsecond {
		t.Fatalf("2ms floor %v %v, want 4.2ms", f, ok)
	}
	if _, ok := r.Floor(Shaped(7 * time.Millisecond)); ok {
		t.Fatal("a failed round trip gave a floor")
	}
	got := r.putCells(Puts(r.rep))
	want := [][]string{
		{"dyad", "veth (dyad-pair's layout)", "450 µs", "900 µs", "3.00×", "6.00×", "3.75×", "4.50×", "0.50×"},
		{"dyad-pair", "veth (dyad-pair's layout)", "600 µs", "1.20 ms", "4.00×", "8.00×", "5.00×", "6.00×", "0.67×"},
		{"etcd-1", "veth (dyad-pair's layout)", "300 µs", "600 µs", "2.00×", "4.00×", "2.50×", "3.00×", "0.33×"},
		{"etcd-3", "veth (dyad-pair's layout)", "900 µs", "3.00 ms", "6.00×", "20.00×", "7.50×", "9.00×", "—"},
		{"dyad-pair@2ms", "shaper, 2ms each way", "6.00 ms", "9.00 ms", "1.43×", "2.14×", "—", "60.00×", "—"},
		{"dyad-pair@2ms (delay profile)", "shaper, 2ms each way", "6.15 ms", "8.00 ms", "1.46×", "1.90×", "—", "61.50×", "0.75×"},
		{"etcd-3@2ms (delay profile)", "shaper, 2ms each way", "8.20 ms", "12.00 ms", "1.95×", "2.86×", "—", "82.00×", "—"},
		{"dyad-pair@7ms (delay profile)", "shaper, 7ms each way", "20.00 ms", "30.00 ms", "—", "—", "—", "200.00×", "—"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d:\n%v", len(got), len(want), got)
	}
	for i := range want {
		if strings.Join(got[i], " | ") != strings.Join(want[i], " | ") {
			t.Errorf("row %d:\n got %s\nwant %s", i, strings.Join(got[i], " | "), strings.Join(want[i], " | "))
		}
	}
	if h := r.putHeader(); len(h) != len(want[0]) {
		t.Errorf("header %v has %d columns, rows %d", h, len(h), len(want[0]))
	}
}

// TestNoFdatasyncNoFloor: without the fdatasync there is no floor in any
// layout, and the reference's column goes when there is no reference.
func TestNoFdatasyncNoFloor(t *testing.T) {
	r := sample()
	r.SyncErr, r.RefName = "read-only file system", ""
	for _, c := range r.putCells(Puts(r.rep)) {
		if c[4] != "—" || c[5] != "—" || c[6] != "—" {
			t.Errorf("%s: ratios %v without an fdatasync", c[0], c[4:7])
		}
	}
	if h := r.putHeader(); strings.Contains(strings.Join(h, " "), "ddsperf") {
		t.Errorf("header %v names a reference the run did not have", h)
	}
}

// TestSectionRenders: the Markdown has the parts, the floors and the put
// table, failures included; the HTML is the same text, escaped.
func TestSectionRenders(t *testing.T) {
	r := sample()
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		"| append + fdatasync | work directory | 1000 | 100 µs |",
		"| DDS round trip | veth (dyad-pair's layout) | 1000 | 50 µs |",
		"| ddsperf round trip (reference) | shaper, 2ms each way | failed: ddsperf: gone |",
		"| DDS round trip | shaper, 7ms each way | failed: netns: no root |",
		"| veth (dyad-pair's layout) | 150 µs | 120 µs |",
		"| shaper, 2ms each way | 4.20 ms | — |",
		"| dyad-pair | veth (dyad-pair's layout) | 600 µs |",
	} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("Markdown lacks %q:\n%s", s, md.String())
		}
	}
	var h strings.Builder
	if err := r.HTML(&h); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(h.String(), "dyad-pair&#39;s layout") || strings.Contains(h.String(), "dyad-pair's layout") {
		t.Errorf("HTML not escaped:\n%s", h.String())
	}
}
