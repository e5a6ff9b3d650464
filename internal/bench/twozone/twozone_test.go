package twozone

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

func TestSplitProfiles(t *testing.T) {
	for _, c := range []struct {
		in         string
		mine, rest []string
	}{
		{"raw", nil, []string{"raw"}},
		{"failover", []string{"failover"}, nil},
		{"raw,contrast,k8s", []string{"contrast"}, []string{"raw", "k8s"}},
		{"two-zone", Profiles, nil},
		{"all", Profiles, []string{"all"}},
		{"failover,two-zone, failover", []string{"failover", "replication", "load", "contrast", "delay"}, nil},
		{"", nil, nil},
	} {
		mine, rest := SplitProfiles(c.in)
		if !slices.Equal(mine, c.mine) || !slices.Equal(rest, c.rest) {
			t.Errorf("SplitProfiles(%q) = %q, %q; want %q, %q", c.in, mine, rest, c.mine, c.rest)
		}
	}
}

func TestDistOf(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100..1, unsorted
	}
	for _, c := range []struct {
		name string
		in   []time.Duration
		want Dist
	}{
		{"empty", nil, Dist{}},
		{"one", ms(7), Dist{N: 1, P50: 7 * time.Millisecond, P90: 7 * time.Millisecond, P99: 7 * time.Millisecond, P999: 7 * time.Millisecond, Max: 7 * time.Millisecond}},
		// Nearest rank: p50 of 1..100 is the 50th value.
		{"hundred", ms(hundred...), Dist{N: 100, P50: 50 * time.Millisecond, P90: 90 * time.Millisecond, P99: 99 * time.Millisecond, P999: 100 * time.Millisecond, Max: 100 * time.Millisecond}},
	} {
		if got := distOf(c.in); got != c.want {
			t.Errorf("%s: distOf = %+v, want %+v", c.name, got, c.want)
		}
	}
}

// The matcher pairs acknowledgements with deliveries in either order,
// ignores deliveries on the writer's own zone, and attributes direction by
// the primary's zone.
func TestMatcher(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	m := &matcher{t0: t0, prefix: "p/", acks: map[string]time.Time{}, seen: map[string]time.Time{}, leader: 0}
	m.ack(0, "p/a/00/1", 1, at(10))
	m.delivered(0, "p/a/00/1", at(11)) // own zone: ignored
	m.delivered(1, "p/a/00/1", at(14)) // 4 ms after the ack, through the primary
	m.delivered(0, "p/b/00/1", at(20)) // before its ack: counts as 0
	m.ack(1, "p/b/00/1", 2, at(25))
	m.ack(1, "p/b/00/2", 3, at(30)) // never delivered
	if want := [][]time.Duration{{4 * time.Millisecond}, {0}}; !slices.Equal(m.lat[0], want[0]) || !slices.Equal(m.lat[1], want[1]) {
		t.Errorf("latencies %v, want %v", m.lat, want)
	}
	if m.early != 1 || len(m.acks) != 1 || len(m.seen) != 0 {
		t.Errorf("early %d, pending acks %d, pending deliveries %d; want 1, 1, 0", m.early, len(m.acks), len(m.seen))
	}
}

func TestTrafficTimeline(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := &traffic{}
	for _, s := range []sample{
		{zone: 1, write: true, ok: true, start: at(0), end: at(5)},
		{zone: 1, write: true, ok: false, start: at(2), end: at(3000)}, // held across the kill at 10
		{zone: 1, write: true, probe: true, ok: true, start: at(1200), end: at(1210)},
		{zone: 0, write: true, ok: true, start: at(1100), end: at(1220)},
		{zone: 1, write: true, ok: true, start: at(3001), end: at(3010)},
	} {
		tr.samples = append(tr.samples, s)
	}
	if got, ok := tr.first(1, true, at(10)); !ok || !got.Equal(at(1210)) {
		t.Errorf("first write through b after the kill: %v %v, want %v", got.Sub(t0), ok, 1210*time.Millisecond)
	}
	steady, ok := tr.firstWhere(at(10), func(s sample) bool { return s.zone == 1 && !s.probe && s.ok && !s.start.Before(at(10)) })
	if !ok || !steady.Equal(at(3010)) {
		t.Errorf("first steady write through b after the kill: %v, want 3.01s", steady.Sub(t0))
	}
	if n := tr.count(at(10), func(s sample) bool { return s.zone == 1 && !s.ok && s.start.Before(at(10)) }); n != 1 {
		t.Errorf("held writes %d, want 1", n)
	}
	if _, ok := tr.first(1, false, at(0)); ok {
		t.Error("a read found where none was recorded")
	}
	rates := rateSeries(tr.samples, t0)
	if got := rates[1][0].Y; got != 1 {
		t.Errorf("zone b's first bucket holds %v writes, want 1", got)
	}
	if got := rates[1][12].Y; got != 1 { // the probe ending at 1.21 s
		t.Errorf("zone b's bucket at 1.2 s holds %v writes, want 1", got)
	}
}

// TestPhaseCounts: a phase counts the steady clients' successful requests
// that ended inside its window (probes and failures not), and the series
// rate sums the completed rounds only.
func TestPhaseCounts(t *testing.T) {
	t0 := time.Unix(2000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tr := &traffic{samples: []sample{
		{zone: 0, write: true, ok: true, start: at(0), end: at(100)},
		{zone: 1, write: false, ok: true, start: at(50), end: at(200)},
		{zone: 1, write: true, ok: true, probe: true, start: at(300), end: at(400)}, // a probe
		{zone: 0, write: true, ok: false, start: at(500), end: at(900)},             // failed
		{zone: 0, write: true, ok: true, start: at(950), end: at(1000)},             // at the window's end: outside
	}}
	tests := []struct {
		name     string
		from, to int
		want     PhaseCount
	}{
		{"whole window", 0, 1000, PhaseCount{Seconds: 1, Writes: 1, Reads: 1}},
		{"from the read on", 150, 2000, PhaseCount{Seconds: 1.85, Writes: 1, Reads: 1}},
		{"nothing inside", 210, 950, PhaseCount{Seconds: 0.74}},
		{"empty window", 500, 500, PhaseCount{}},
	}
	for _, tt := range tests {
		if got := tr.phase(at(tt.from), at(tt.to)); got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
	kills := []Kill{
		{Phases: [numPhases]PhaseCount{{Seconds: 2, Writes: 200, Reads: 100}, {Seconds: 1, Writes: 60}, {Seconds: 1, Writes: 80, Reads: 40}}},
		{Phases: [numPhases]PhaseCount{{Seconds: 2, Writes: 200, Reads: 100}, {Seconds: 1, Writes: 40}, {Seconds: 1, Writes: 120, Reads: 60}}},
		{Phases: [numPhases]PhaseCount{{Seconds: 9, Writes: 9}}, Err: "a round that did not complete"},
	}
	rates := phaseRates(kills)
	want := []PhaseRate{
		{Name: PhaseNames[PhaseSteady], Seconds: 4, Writes: 100, Reads: 50},
		{Name: PhaseNames[PhaseZoneLost], Seconds: 2, Writes: 50},
		{Name: PhaseNames[PhaseRejoin], Seconds: 2, Writes: 100, Reads: 50},
	}
	if len(rates) != len(want) {
		t.Fatalf("%d phases, want %d", len(rates), len(want))
	}
	for i := range want {
		if rates[i] != want[i] {
			t.Errorf("phase %d: %+v, want %+v", i, rates[i], want[i])
		}
	}
}

// faultyStub is a target.Faulty that never runs (Expected only looks at
// its type).
type faultyStub struct{}

func (faultyStub) Name() string                            { return "stub" }
func (faultyStub) Start(context.Context) ([]string, error) { return nil, nil }
func (faultyStub) Stop() error                             { return nil }
func (faultyStub) Version() string                         { return "" }
func (faultyStub) Fault() string                           { return "" }
func (faultyStub) Kill()                                   {}
func (faultyStub) Revive() error                           { return nil }

// TestExpected: the progress bar's estimate counts each selected benchmark
// that applies to the target, and nothing for one that does not.
func TestExpected(t *testing.T) {
	cfg := Config{Kills: 20, Settle: 2 * time.Second, Duration: 30 * time.Second, LoadDuration: 3 * time.Minute, Window: 10 * time.Second}
	pair := target.Target((*target.Pair)(nil))
	tests := []struct {
		name     string
		selected []string
		t        target.Target
		want     time.Duration
	}{
		{"pair, everything", Profiles, pair, 35*time.Second + 20*8*time.Second + 185*time.Second},
		{"pair, failover only", []string{ProfileFailover}, pair, 160 * time.Second},
		{"pair, contrast only", []string{ProfileContrast}, pair, 0},
		{"faulty, everything", Profiles, faultyStub{}, 30 * time.Second},
		{"faulty, no contrast", []string{ProfileLoad}, faultyStub{}, 0},
	}
	for _, tt := range tests {
		b := &Bench{Selected: tt.selected, Config: cfg}
		if got := b.Expected(tt.t); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	// The delay benchmark counts, per delay, a start and two cells of a
	// second's warm-up plus DelayDuration, on etcd-3 and dyad-pair only.
	cfg.Delays, cfg.DelayDuration = []time.Duration{0, time.Millisecond}, 4*time.Second
	perDelay := 15*time.Second + 2*5*time.Second
	for _, tt := range []struct {
		t    target.Target
		want time.Duration
	}{
		{namedStub{name: "etcd-3"}, 2*perDelay + 30*time.Second},
		{namedStub{name: "etcd-1"}, 30 * time.Second},
	} {
		b := &Bench{Selected: Profiles, Config: cfg}
		if got := b.Expected(tt.t); got != tt.want {
			t.Errorf("%s with delays: %v, want %v", tt.t.Name(), got, tt.want)
		}
	}
}

// namedStub is a faultyStub with a name.
type namedStub struct {
	faultyStub
	name string
}

func (n namedStub) Name() string { return n.name }

// TestDelaySection: the delay section puts each delay's dyad-pair and
// etcd-3 rows side by side with dyad-pair's ratios to etcd-3 at the same
// delay, and shows a failed run as failed.
func TestDelaySection(t *testing.T) {
	res := func(p50, p99, thr float64) workload.Result {
		return workload.Result{Op: workload.Put, Ops: 100, P50US: p50, P99US: p99, Throughput: thr}
	}
	r := &DelayResult{Clients: 64, Rows: []DelayRow{
		{System: "dyad-pair", Delay: 2 * time.Millisecond, One: res(6000, 9000, 0), Many: res(0, 0, 3000)},
		{System: "etcd-3", Delay: 2 * time.Millisecond, One: res(8000, 12000, 0), Many: res(0, 0, 2000)},
		{System: "dyad-pair", Delay: 500 * time.Microsecond, Err: "start: boom\nmore"},
	}}
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| 2ms | dyad-pair | 6.00 ms | 9.00 ms | 3000 | 0.75× | 0.75× | 1.50× |",
		"| 2ms | etcd-3 | 8.00 ms | 12.00 ms | 2000 |  |  |  |",
		"| 500µs | dyad-pair | failed: start: boom more |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	var h strings.Builder
	if err := r.HTML(&h); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(h.String(), "<svg"); n != 2 {
		t.Errorf("%d plots, want 2 (latency and throughput)", n)
	}
}
