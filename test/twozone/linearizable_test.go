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

// Clients read, write and compare-and-swap on both nodes while the primary
// is killed with SIGKILL twice and restarted; porcupine must find the
// recorded history linearizable (no split brain is possible in these
// faults, and none may be reported). Unknown outcomes count as either; a
// checker timeout fails.
func TestLinearizableAcrossFailovers(t *testing.T) {
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
		linearize.Workload{Clients: clis, Concurrency: 4, Keys: keys, OpTimeout: 3 * time.Second}.
			Run(context.Background(), rec, 0, 16*time.Second)
	}()
	time.Sleep(2 * time.Second)
	z.kill(leader) // kill -9 of the primary
	z.waitLeading(1-leader, resumeWithin)
	time.Sleep(time.Second)
	z.start(leader)
	leader = z.waitPair(30 * time.Second)
	time.Sleep(time.Second)
	z.kill(leader) // and the new primary
	z.waitLeading(1-leader, resumeWithin)
	time.Sleep(time.Second)
	z.start(leader)
	z.waitPair(30 * time.Second)
	wg.Wait()
	st := rec.Stats()
	t.Logf("history: %+v; errors: %v", st, rec.Errors())
	noSplitBrain(t, z, "kill -9")
	linearize.Check(t, rec.Operations(), 4*time.Minute)
}

// The same check across a freeze: SIGSTOP of the primary for 3 leases, the
// replica takes over, the old primary thaws, steps down and rejoins.
func TestLinearizableAcrossFreeze(t *testing.T) {
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
		linearize.Workload{Clients: clis, Concurrency: 4, Keys: keys, OpTimeout: 3 * time.Second}.
			Run(context.Background(), rec, 0, 12*time.Second)
	}()
	time.Sleep(2 * time.Second)
	z.signal(leader, syscall.SIGSTOP)
	z.waitLeading(1-leader, resumeWithin)
	time.Sleep(3 * z.lease)
	z.signal(leader, syscall.SIGCONT)
	z.waitPair(30 * time.Second)
	wg.Wait()
	t.Logf("history: %+v; errors: %v", rec.Stats(), rec.Errors())
	noSplitBrain(t, z, "SIGSTOP")
	linearize.Check(t, rec.Operations(), 4*time.Minute)
}
