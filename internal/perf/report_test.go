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

// The ddsnet path table gives a transport row's means and medians layer
// by layer, with what the layers leave unaccounted against the row's own
// round trip and the baseline's median of the same variant for scale;
// rows without stamps get no line.
func TestNetPathCells(t *testing.T) {
	us := func(n int) time.Duration { return time.Duration(n) * time.Microsecond }
	layers := func(w, d, k, tk, tn int) NetLayers {
		return NetLayers{Write: us(w), Deliver: us(d), Wake: us(k), Take: us(tk), Turn: us(tn)}
	}
	r := &Results{Baseline: "ddsperf", Rows: []Row{
		{System: "ddsperf", Size: 64, RTT: RTT{P50: us(10)}},
		{System: "ddsperf" + SecureSuffix, Size: 64, RTT: RTT{P50: us(25)}},
		{System: NetSystem, Size: 64, RTT: RTT{Mean: us(100), P50: us(60)},
			Path: &NetPath{Count: 5, Mean: layers(30, -5, 50, 20, 1), P50: layers(20, -4, 30, 10, 1)}},
		{System: NetSystem + SecureSuffix, Size: 64, RTT: RTT{Mean: us(200), P50: us(150)},
			Path: &NetPath{Count: 5, Mean: layers(80, 10, 60, 40, 2), P50: layers(70, 5, 40, 30, 1)}},
		{System: NetSystem, Size: 1024, RTT: RTT{Mean: us(100)}},
	}}
	var got []string
	for _, c := range r.netPathCells() {
		got = append(got, strings.Join(c, " "))
	}
	want := []string{
		"dyad-ddsnet 64 mean 100.0µs 30.0µs -5.0µs 50.0µs 20.0µs 1.0µs 4.0µs 10.0µs",
		"dyad-ddsnet 64 p50 60.0µs 20.0µs -4.0µs 30.0µs 10.0µs 1.0µs 3.0µs 10.0µs",
		"dyad-ddsnet +sec 64 mean 200.0µs 80.0µs 10.0µs 60.0µs 40.0µs 2.0µs 8.0µs 25.0µs",
		"dyad-ddsnet +sec 64 p50 150.0µs 70.0µs 5.0µs 40.0µs 30.0µs 1.0µs 4.0µs 25.0µs",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("path cells:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	var b strings.Builder
	if err := r.WriteMarkdown(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Where a ddsnet round trip goes") {
		t.Errorf("no path table in:\n%s", b.String())
	}
}
