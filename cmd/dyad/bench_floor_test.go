package main

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/floor"
	"github.com/dyad-db/dyad/internal/bench/netns"
	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// TestFloorRoundTrip runs the floor's round trips with the real binding
// between two zones' namespaces laid out as dyad-pair's: every round trip
// asked for is measured, and with the zones 2 ms apart each way through
// the shaper, the median is at least the 4 ms the delay alone costs, for
// ddsnet's round trip and for ddsperf's reference (which ddsperf itself
// prints halved).
func TestFloorRoundTrip(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces")
	testenv.NeedCommand(t, "ip", "iproute2")
	var b testutil.Builder
	t.Cleanup(b.Cleanup)
	bin := b.Build(t)
	const delay = 2 * time.Millisecond
	const count = 50
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ddsperf, lookErr := exec.LookPath("ddsperf")
	for _, l := range []floor.Layout{floor.Direct, floor.Shaped(delay)} {
		t.Run(l.String(), func(t *testing.T) {
			np, err := netns.NewWith(netns.Options{Delay: l.Delay, Hub: l.Shaped})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := np.Close(); err != nil {
					t.Error(err)
				}
			})
			d, err := floorRoundTrip(bin)(ctx, np, 256, count)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ddsnet: %+v", d)
			if d.N != count || d.P50 <= 0 || d.P50 > d.P99 || d.P99 > d.Max {
				t.Errorf("ddsnet round trips %+v, want %d ordered positive figures", d, count)
			}
			if l.Shaped && d.P50 < 2*delay {
				t.Errorf("ddsnet round trip p50 %v with the zones %v apart each way, below %v", d.P50, delay, 2*delay)
			}
			if lookErr != nil {
				t.Logf("no ddsperf reference: %v", lookErr)
				return
			}
			r, err := floorReference(ddsperf)(ctx, np, 256, count)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("ddsperf: %+v", r)
			if r.N == 0 || r.P50 <= 0 {
				t.Errorf("ddsperf round trips %+v, want some", r)
			}
			if l.Shaped && r.P50 < 2*delay {
				t.Errorf("ddsperf round trip p50 %v with the zones %v apart each way, below %v", r.P50, delay, 2*delay)
			}
		})
	}
}
