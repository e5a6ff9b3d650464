package twozone

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// The primary is killed -9 with writes it journaled and sent that its
// replica never got (its link to the replica is down): never
// acknowledged. The replica takes over and writes alone; the old primary
// restarts, rejoins as replica and finds those writes a suffix the
// leader's log lacks. It drops them in place (the commit index it kept on
// disk is below them), with no snapshot: nothing acknowledged is lost,
// the unacknowledged writes are gone, and both nodes hold the same data.
func TestRestartedPrimaryDropsUnacknowledgedSuffix(t *testing.T) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := z.waitPair(30 * time.Second)
	replica := 1 - leader
	putMany(t, z, leader, 200, "acked")

	z.linkDown(leader) // the leader's entries no longer reach the replica
	cli := z.client(leader)
	done := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func(i int) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_, err := cli.Put(ctx, fmt.Sprintf("unacked/%d", i), "x")
			done <- err
		}(i)
	}
	time.Sleep(200 * time.Millisecond) // journaled and sent, never acknowledged
	z.kill(leader)
	for i := 0; i < 8; i++ {
		if err := <-done; err == nil {
			t.Fatalf("a write was acknowledged while the replica could not receive it")
		}
	}
	z.clearFaults()
	z.waitLeading(replica, resumeWithin)
	putMany(t, z, replica, 100, "solo")

	z.start(leader)
	if got := z.waitPair(60 * time.Second); got != replica {
		t.Fatalf("node %c leads after the rejoin, want the former replica %c", 'a'+got, 'a'+replica)
	}
	putMany(t, z, replica, 10, "after")
	converged(t, z, replica)
	for _, c := range []struct {
		prefix string
		want   int64
	}{{"acked", 200}, {"solo", 100}, {"after", 10}, {"unacked", 0}} {
		if n := countKeys(t, z, leader, c.prefix); n != c.want {
			t.Errorf("the rejoined node holds %d %s keys, want %d", n, c.prefix, c.want)
		}
	}
	dropped := z.metric(leader, "dyad_suffixes_dropped_total")
	installed := z.metric(leader, "dyad_snapshots_installed_total")
	if dropped < 1 || installed != 0 {
		t.Errorf("the rejoined node dropped %v suffixes in place and installed %v snapshots, want >= 1 and 0", dropped, installed)
	}
}
