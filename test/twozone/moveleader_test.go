package twozone

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// etcdctl runs the real etcdctl ($DYAD_ETCDCTL_BIN, else the reference
// build, as test/etcdctl finds it) against both nodes.
func (z *zones) etcdctl(bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), resumeWithin)
	defer cancel()
	full := append([]string{"--endpoints=" + z.endpoint(0) + "," + z.endpoint(1), "--dial-timeout=5s", "--command-timeout=15s"}, args...)
	cmd := exec.CommandContext(ctx, bin, full...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// etcdctl move-leader, under writes on both nodes, moves the role to the
// replica and back: each time the other node leads, writes resume, and it
// is a hand-over, not a failover (no node promoted itself after a lease
// expired); nothing acknowledged is lost and no revision runs backwards.
func TestMoveLeader(t *testing.T) {
	bin := os.Getenv("DYAD_ETCDCTL_BIN")
	if bin == "" {
		bin = "etcdctl"
	}
	bin = testutil.RequireBinary(t, bin)
	z, leader, w := startPair(t)
	w.waitProgress(t, 100, resumeWithin)
	for round := 0; round < 2; round++ {
		target, _ := z.leader(1 - leader)
		if target == 0 {
			t.Fatalf("round %d: node %c did not answer Status", round, 'a'+(1-leader))
		}
		start := time.Now()
		out, err := z.etcdctl(bin, "move-leader", fmt.Sprintf("%x", target))
		took := time.Since(start)
		if err != nil {
			t.Fatalf("round %d: etcdctl move-leader: %v\n%s", round, err, out)
		}
		if got := z.waitPair(30 * time.Second); got != 1-leader {
			t.Fatalf("round %d: node %c leads after move-leader, want %c", round, 'a'+got, 'a'+(1-leader))
		}
		resumed := time.Now()
		w.waitProgress(t, 100, resumeWithin)
		t.Logf("round %d: %q in %s; the next 100 writes acknowledged in %s", round, out, took, time.Since(resumed))
		leader = 1 - leader
	}
	w.stop()
	w.verify(t, leader)
	w.verify(t, 1-leader)
	converged(t, z, leader)
	noSplitBrain(t, z, "move-leader")
	for i := 0; i < 2; i++ {
		if z.logContains(i, `why="primary lost"`) {
			t.Errorf("node %c promoted itself after a lease expired: a failover, not a hand-over", 'a'+i)
		}
	}
}

// Porcupine over reads and writes on both nodes while the role is moved
// to the replica and back with clientv3's MoveLeader.
func TestLinearizableAcrossMoveLeader(t *testing.T) {
	checkLinearizable(t, 10*time.Second, func(z *zones, leader int) {
		for round := 0; round < 2; round++ {
			time.Sleep(3 * time.Second)
			target, _ := z.leader(1 - leader)
			ctx, cancel := context.WithTimeout(context.Background(), resumeWithin)
			_, err := z.client(leader).MoveLeader(ctx, target)
			cancel()
			if err != nil {
				t.Errorf("move-leader %c -> %c: %v", 'a'+leader, 'a'+(1-leader), err)
				return
			}
			leader = 1 - leader
			z.waitLeading(leader, resumeWithin)
		}
	})
}
