package main

import (
	"testing"
	"time"
)

// TestPerfSystems checks --systems: an empty list runs every system, a
// list only the systems it names.
func TestPerfSystems(t *testing.T) {
	r := perfRun{systems: []string{"ddsperf", "dyad-ddsnet"}}
	for sys, want := range map[string]bool{"ddsperf": true, "dyad-ddsnet": true, "dyad-inline": false, "dyad-ddsnet+ws": false} {
		if r.runs(sys) != want {
			t.Errorf("runs(%q) = %v, want %v", sys, !want, want)
		}
	}
	if !(perfRun{}).runs("dyad-pair") {
		t.Error("no --systems: dyad-pair not run")
	}
}

// TestPerfTimeoutWithoutLatency checks that --no-latency drops the round
// trips' share of a path's time bound and keeps the throughput phase's.
func TestPerfTimeoutWithoutLatency(t *testing.T) {
	r := perfRun{sizes: []int{64, 1024}, count: 5000, tputDur: 3 * time.Second}
	withLat := r.pathTimeout()
	r.noLat = true
	if got, want := r.pathTimeout(), withLat-2*5000*2*time.Millisecond; got != want {
		t.Fatalf("pathTimeout with --no-latency = %v, want %v", got, want)
	}
}
