package perf

import (
	"strings"
	"testing"
	"time"
)

func TestSplitWrites(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	if SplitWrites(nil, WriteSample{}) != nil {
		t.Fatal("a split of no writes")
	}
	// Three writes: the caller's own work is Send−Call, the cgo part
	// Call−Write, off-CPU Write−CPU.
	ws := []WriteSample{
		{Send: us(10), Call: us(9), Write: us(8), CPU: us(5)},
		{Send: us(20), Call: us(18), Write: us(15), CPU: us(6), Involuntary: 2},
		{Send: us(30), Call: us(27), Write: us(25), CPU: us(10), Voluntary: 1, Involuntary: 1},
	}
	s := SplitWrites(ws, WriteSample{Call: us(2), Write: us(1), CPU: us(1)})
	if s.Count != 3 {
		t.Fatalf("count %d", s.Count)
	}
	if want := (WriteLayers{Send: us(20), Caller: us(2), Cgo: us(2), OnCPU: us(7), OffCPU: us(9)}); s.Mean != want {
		t.Errorf("means %+v, want %+v", s.Mean, want)
	}
	if want := (WriteLayers{Send: us(20), Caller: us(2), Cgo: us(2), OnCPU: us(6), OffCPU: us(9)}); s.P50 != want {
		t.Errorf("medians %+v, want %+v", s.P50, want)
	}
	if want := (WriteLayers{Send: us(2), Cgo: us(1), OnCPU: us(1)}); s.Stamp != want {
		t.Errorf("stamp %+v, want %+v", s.Stamp, want)
	}
	if s.Voluntary != 1.0/3 || s.Involuntary != 1 || s.Preempted != 2.0/3 {
		t.Errorf("switches %v voluntary, %v involuntary, %v preempted", s.Voluntary, s.Involuntary, s.Preempted)
	}
	r := &Results{Baseline: "ddsperf", Rows: []Row{{System: NetSystem, Size: 64, Writes: s}, {System: "dyad-inline", Size: 64}}}
	var got []string
	for _, c := range r.writeSplitCells() {
		got = append(got, strings.Join(c, " "))
	}
	want := []string{
		"dyad-ddsnet 64 mean 20.0µs 2.0µs 2.0µs 7.0µs 9.0µs 0.33 1.00 67%",
		"dyad-ddsnet 64 p50 20.0µs 2.0µs 2.0µs 6.0µs 9.0µs 0.33 1.00 67%",
		"dyad-ddsnet 64 stamp 2.0µs 0.0µs 1.0µs 1.0µs 0.0µs - - -",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("write cells:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Where a ping's write goes") {
		t.Errorf("no write table in:\n%s", b.String())
	}
}
