package perf

import (
	"testing"
	"time"
)

func TestParsePing(t *testing.T) {
	const l1 = "[1] 1.000  vm:2 size 64 mean 50.0us min 10.0us 50% 100.000us 90% 200.0us 99% 300.0us max 900.0us cnt 10\n"
	const l2 = "[1] 2.000  vm:2 size 64 mean 50.0us min 10.0us 50% 20.000us 90% 40.0us 99% 60.0us max 80.0us cnt 300\n"
	const l3 = "[1] 3.000  vm:2 size 64 mean 50.0us min 10.0us 50% 40.000us 90% 80.0us 99% 120.0us max 500.0us cnt 100\n"
	const rss = "[1] 2.000  rss:7.6MB vcsw:25425 ivcsw:19170\n"
	tests := []struct {
		name    string
		out     string
		want    RTT
		wantErr bool
	}{
		{"no lines", "participant new\n", RTT{}, true},
		// ddsperf prints half of each round trip (it records
		// (now - sent) / 2); the RTT is twice what it prints.
		{"single interval kept", l1, RTT{Count: 10, P50: 200 * time.Microsecond, P90: 400 * time.Microsecond, P99: 600 * time.Microsecond, Max: 1800 * time.Microsecond}, false},
		// First interval dropped; the rest weighted by count (300 and 100).
		{"weighted", l1 + rss + l2 + rss + l3, RTT{Count: 400, P50: 50 * time.Microsecond, P90: 100 * time.Microsecond, P99: 150 * time.Microsecond, Max: 1000 * time.Microsecond}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePing(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Fatalf("got %+v want %+v", got, tc.want)
			}
		})
	}
}

func TestParseSub(t *testing.T) {
	line := func(total, lost, rate, mbps string) string {
		return "[9] 3.000  size 1024 total " + total + " lost " + lost + " delta 5 lost " + lost + " rate " + rate + " kS/s " + mbps + " Mb/s (1.00 kS/s 8.00 Mb/s)\n"
	}
	idle := "[9] 6.000  size 1024 total 510 lost 0 delta 0 lost 0 rate 0.00 kS/s 0.00 Mb/s (1.00 kS/s 8.00 Mb/s)\n"
	tests := []struct {
		name    string
		out     string
		want    Tput
		wantErr bool
	}{
		{"no data", "[9] participant gone\n", Tput{}, true},
		{"best of two intervals", line("100", "0", "10.00", "80.00") + line("300", "0", "20.00", "160.00"),
			Tput{Count: 300, Rate: 20000, MBps: 20}, false},
		{"mean of the full intervals", line("100", "0", "50.00", "400.00") + line("300", "0", "20.00", "160.00") +
			line("500", "0", "30.00", "240.00") + line("510", "0", "0.01", "0.08") + idle,
			Tput{Count: 510, Rate: 25000, MBps: 25}, false},
		{"loss is an error", line("100", "3", "10.00", "80.00"), Tput{}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseSub(tc.out)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %+v want %+v", got, tc.want)
			}
		})
	}
}

func TestSecureCells(t *testing.T) {
	us := time.Microsecond
	res := Results{Baseline: "ddsperf", Rows: []Row{
		{System: "ddsperf", Size: 64, RTT: RTT{P50: 40 * us, P99: 100 * us}, Tput: Tput{Rate: 1000}},
		{System: "ddsperf" + SecureSuffix, Size: 64, RTT: RTT{P50: 80 * us, P99: 150 * us}, Tput: Tput{Rate: 400}},
		{System: "dyad-ddsnet", Size: 64, RTT: RTT{P50: 100 * us, P99: 200 * us}},
		{System: "dyad-ddsnet" + SecureSuffix, Size: 64, RTT: RTT{P50: 250 * us, P99: 300 * us}},
		{System: "dyad-ddsnet" + SecureSuffix, Size: 1024, RTT: RTT{P50: 250 * us}}, // no plain row: skipped
		{System: "dyad-inline" + SecureSuffix, Size: 64, Err: "failed"},             // failed: skipped
		{System: "dyad-inline", Size: 64, RTT: RTT{P50: 50 * us}},
	}}
	got := res.secureCells()
	want := [][]string{
		{"ddsperf", "64", "2.00", "1.50", "0.40"},
		{"dyad-ddsnet", "64", "2.50", "1.50", "-"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		for j := range want[i] {
			if got[i][j] != want[i][j] {
				t.Errorf("row %d col %d = %q, want %q (%v)", i, j, got[i][j], want[i][j], got[i])
			}
		}
	}
}
