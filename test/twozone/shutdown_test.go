package twozone

import (
	"syscall"
	"testing"
	"time"
)

// SIGTERM of the primary under writes on both nodes: it hands its role to
// the replica before it stops (a hand-over, not a failover: the replica
// never promotes itself after a lease expired), writes resume on the
// survivor, and after the stopped node returns nothing acknowledged is
// missing from either node.
func TestSigtermPrimaryHandsOver(t *testing.T) {
	z, leader, w := startPair(t)
	w.waitProgress(t, 100, resumeWithin)
	survivor := 1 - leader
	start := time.Now()
	z.signal(leader, syscall.SIGTERM)
	z.waitLeading(survivor, resumeWithin)
	t.Logf("node %c leads %s after SIGTERM of the primary", 'a'+survivor, time.Since(start))
	w.waitProgress(t, 100, resumeWithin)
	deadline := time.Now().Add(resumeWithin)
	for !z.logContains(leader, `msg=stopped`) {
		if time.Now().After(deadline) {
			t.Fatalf("node %c did not stop within %s of SIGTERM", 'a'+leader, resumeWithin)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !z.logContains(leader, "handing the primary role over") {
		t.Errorf("node %c stopped without handing its role over", 'a'+leader)
	}
	if z.logContains(survivor, `why="primary lost"`) {
		t.Errorf("node %c promoted itself after a lease expired: a failover, not a hand-over", 'a'+survivor)
	}
	// The stopped node, by then the replica, said it was leaving: the
	// survivor led alone at once instead of waiting out a lease.
	if !z.logContains(survivor, `why="the replica is stopping"`) {
		t.Errorf("node %c did not go solo on the stopping replica's word", 'a'+survivor)
	}
	z.kill(leader) // reaps the exited process
	z.start(leader)
	if got := z.waitPair(30 * time.Second); got != survivor {
		t.Fatalf("node %c leads after the stopped node returned, want %c", 'a'+got, 'a'+survivor)
	}
	w.waitProgress(t, 100, resumeWithin)
	w.stop()
	w.verify(t, survivor)
	w.verify(t, leader)
	converged(t, z, survivor)
	noSplitBrain(t, z, "SIGTERM of the primary")
}
