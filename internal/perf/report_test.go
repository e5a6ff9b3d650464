package perf

import (
	"strings"
	"testing"
	"time"
)

// The layer table splits a pair's mean write into the primary's part, the
// transport's round trip of the same size and variant, and the replica's
// part; a pair row without an acknowledgement time, or an errored one,
// gets no line, and a missing transport row leaves its parts open.
func TestLayerCellsSplitThePairsWrite(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	r := &Results{Baseline: "ddsperf", Rows: []Row{
		{System: NetSystem, Size: 64, RTT: RTT{Mean: us(40)}},
		{System: NetSystem + SecureSuffix, Size: 64, RTT: RTT{Mean: us(90)}},
		{System: PairSystem, Size: 64, RTT: RTT{Mean: us(300)}, AckMean: us(200)},
		{System: PairSystem + SecureSuffix, Size: 64, RTT: RTT{Mean: us(500)}, AckMean: us(400)},
		{System: PairSystem, Size: 1024, RTT: RTT{Mean: us(310)}, AckMean: us(210)},
		{System: PairSystem, Size: 4096, RTT: RTT{Mean: us(320)}},
		{System: PairSystem, Size: 16384, Err: "pinger: gone"},
	}}
	var got []string
	for _, c := range r.layerCells() {
		got = append(got, strings.Join(c, " "))
	}
	want := []string{
		"dyad-pair 64 300.0µs 200.0µs 100.0µs 40.0µs 160.0µs",
		"dyad-pair +sec 64 500.0µs 400.0µs 100.0µs 90.0µs 310.0µs",
		"dyad-pair 1024 310.0µs 210.0µs 100.0µs - -",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("layer cells:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b strings.Builder
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Where a pair's write goes") {
		t.Errorf("no layer table in:\n%s", b.String())
	}
}

// Summarise's mean is the mean of what it was given.
func TestSummariseMean(t *testing.T) {
	s := Summarise([]time.Duration{3, 1, 2, 10})
	if s.Mean != 4 || s.P50 != 3 || s.Max != 10 || s.Count != 4 {
		t.Errorf("Summarise = %+v", s)
	}
}
