package twozone

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/linearize"
)

// checkLinearizable records a workload on both nodes for d while faults
// runs, then has porcupine check the history. Unknown outcomes count as
// either; a checker timeout fails. No split brain may be reported.
func checkLinearizable(t *testing.T, d time.Duration, faults func(z *zones, leader int)) {
	z := newZones(t)
	z.start(0)
	z.start(1)
	leader := z.waitPair(30 * time.Second)
	clis := []*clientv3.Client{z.client(0), z.client(1)}
	keys := linearize.DefaultKeys(6)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	init, err := linearize.ReadState(ctx, clis[leader], keys...)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	rec := linearize.NewRecorder(init)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Small enough for porcupine to check in time: revisions are
		// global, so the history cannot be partitioned by key.
		// Paced to at most 500 operations per second per client: a
		// faster pair made 57,294 operations of a 16 s run, which
		// porcupine took 3.5 minutes to check (4 allowed), against
		// 1-45 s for 32,000-48,000.
		linearize.Workload{Clients: clis, Concurrency: 4, Keys: keys, OpTimeout: 3 * time.Second, Interval: 2 * time.Millisecond}.
			Run(context.Background(), rec, 0, d)
	}()
	faults(z, leader)
	wg.Wait()
	t.Logf("history: %+v; errors: %v", rec.Stats(), rec.Errors())
	noSplitBrain(t, z, "the faults")
	linearize.Check(t, rec.Operations(), 4*time.Minute)
}

// Clients read, write and compare-and-swap on both nodes while the primary
// is killed with SIGKILL, restarted, and the new primary killed too.
func TestLinearizableAcrossFailovers(t *testing.T) {
	checkLinearizable(t, 16*time.Second, func(z *zones, leader int) {
		for round := 0; round < 2; round++ {
			time.Sleep(2 * time.Second)
			z.kill(leader)
			z.waitLeading(1-leader, resumeWithin)
			time.Sleep(time.Second)
			z.start(leader)
			leader = z.waitPair(30 * time.Second)
		}
	})
}

// The same across a freeze: SIGSTOP of the primary for 3 leases, the
// replica takes over, the old primary thaws, steps down and rejoins.
func TestLinearizableAcrossFreeze(t *testing.T) {
	checkLinearizable(t, 12*time.Second, func(z *zones, leader int) {
		time.Sleep(2 * time.Second)
		z.signal(leader, syscall.SIGSTOP)
		z.waitLeading(1-leader, resumeWithin)
		time.Sleep(3 * z.lease)
		z.signal(leader, syscall.SIGCONT)
		z.waitPair(30 * time.Second)
	})
}
