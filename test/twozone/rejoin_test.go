package twozone

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// putMany writes n keys through node i with 32 concurrent clients.
func putMany(t *testing.T, z *zones, i, n int, prefix string) {
	t.Helper()
	cli := z.client(i)
	errc := make(chan error, 32)
	for c := 0; c < 32; c++ {
		go func(c int) {
			for k := c; k < n; k += 32 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				_, err := cli.Put(ctx, fmt.Sprintf("%s/%07d", prefix, k), "x")
				cancel()
				if err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}(c)
	}
	for c := 0; c < 32; c++ {
		if err := <-errc; err != nil {
			t.Fatalf("bulk write: %v", err)
		}
	}
}

func countKeys(t *testing.T, z *zones, i int, prefix string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := z.client(i).Get(ctx, prefix+"/", withPrefixCountOnly()...)
	if err != nil {
		t.Fatalf("count on %c: %v", 'a'+i, err)
	}
	return resp.Count
}

// Rejoin after many revisions: from the log with the default retention,
// from a snapshot when the log has been trimmed past the replica.
func TestRejoinAfterManyRevisions(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra []string
		n     int
	}{
		{"from the log", nil, 100000},
		{"from a snapshot", []string{"--log-retention-bytes", "1"}, 30000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			z := newZones(t)
			z.start(0, tc.extra...)
			z.start(1, tc.extra...)
			leader := z.waitPair(30 * time.Second)
			replica := 1 - leader
			z.kill(replica)
			putMany(t, z, leader, tc.n, "bulk")
			if len(tc.extra) > 0 {
				time.Sleep(12 * time.Second) // one log-trim period
			}
			z.start(replica, tc.extra...)
			if got := z.waitPair(120 * time.Second); got != leader {
				t.Fatalf("node %c leads after rejoin", 'a'+got)
			}
			converged(t, z, leader)
			if n := countKeys(t, z, replica, "bulk"); n != int64(tc.n) {
				t.Fatalf("rejoined replica holds %d of %d keys", n, tc.n)
			}
			snap := z.logContains(replica, "installed the leader's snapshot")
			if want := len(tc.extra) > 0; snap != want {
				t.Fatalf("snapshot resync = %v, want %v", snap, want)
			}
		})
	}
}

// An empty node replaces a destroyed one: it joins as the replica, never
// starts a pair of its own, and gets everything.
func TestReplaceDestroyedNode(t *testing.T) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := z.waitPair(30 * time.Second)
	putMany(t, z, leader, 2000, "before")
	gone := 1 - leader
	z.kill(gone)
	if err := os.RemoveAll(filepath.Join(z.dir, []string{"a", "b"}[gone])); err != nil {
		t.Fatal(err)
	}
	putMany(t, z, leader, 2000, "solo")
	z.start(gone, "--initial-cluster-state", "existing")
	if got := z.waitPair(60 * time.Second); got != leader {
		t.Fatalf("the replacement leads")
	}
	converged(t, z, leader)
	if n := countKeys(t, z, gone, "before") + countKeys(t, z, gone, "solo"); n != 4000 {
		t.Fatalf("replacement holds %d of 4000 keys", n)
	}
}

// Cold start of both nodes after a blackout: the one that led last leads,
// the other follows, nothing is lost.
func TestColdStartBoth(t *testing.T) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := z.waitPair(30 * time.Second)
	putMany(t, z, leader, 2000, "k")
	z.kill(0)
	z.kill(1)
	z.start(1 - leader)           // the former replica first: it must wait
	z.runFor(1-leader, 4*z.lease) // a node that led last leads after 2
	if m, l := z.leader(1 - leader); m == 0 || l != 0 {
		t.Fatalf("the former replica, alone, reports leader %x (member %x): it must wait", l, m)
	}
	z.start(leader)
	if got := z.waitPair(60 * time.Second); got != leader {
		t.Fatalf("node %c leads after the blackout, want the one that led last", 'a'+got)
	}
	converged(t, z, leader)
	if n := countKeys(t, z, 1-leader, "k"); n != 2000 {
		t.Fatalf("%d of 2000 keys after cold start", n)
	}
}

// "The replica dies, the primary runs solo and dies, the replica returns
// alone": it must wait (the other node holds writes it never saw) and
// refuse writes; when the former primary returns, it leads and the solo
// writes are all there. Then the operator's override: with the former
// primary gone for good, force-primary lets the replica serve alone.
func TestFormerReplicaWaitsAlone(t *testing.T) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := z.waitPair(30 * time.Second)
	replica := 1 - leader
	putMany(t, z, leader, 500, "both")
	z.kill(replica)
	putMany(t, z, leader, 500, "solo") // acknowledged alone
	z.kill(leader)
	z.start(replica)
	z.runFor(replica, 4*z.lease) // a node that led last leads after 2
	if m, l := z.leader(replica); m == 0 || l != 0 {
		t.Fatalf("the former replica, alone, reports leader %x (member %x): it must wait", l, m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	_, err := z.client(replica).Put(ctx, "while-waiting", "x")
	cancel()
	if err == nil {
		t.Fatal("a waiting former replica acknowledged a write")
	}
	z.start(leader)
	if got := z.waitPair(60 * time.Second); got != leader {
		t.Fatalf("node %c leads, want the former primary that holds the solo writes", 'a'+got)
	}
	converged(t, z, leader)
	if n := countKeys(t, z, replica, "solo"); n != 500 {
		t.Fatalf("%d of 500 solo writes on the rejoined replica", n)
	}

	// The former primary is lost for good: force-primary on the replica.
	z.kill(leader)
	z.kill(replica)
	out, err := exec.Command(z.bin, "force-primary", "--data-dir", filepath.Join(z.dir, []string{"a", "b"}[replica])).CombinedOutput()
	if err != nil {
		t.Fatalf("force-primary: %v: %s", err, out)
	}
	z.start(replica)
	z.waitLeading(replica, 30*time.Second)
	putMany(t, z, replica, 10, "forced")
	if n := countKeys(t, z, replica, "both") + countKeys(t, z, replica, "solo"); n != 1000 {
		t.Fatalf("forced node holds %d of 1000 earlier keys", n)
	}
}
