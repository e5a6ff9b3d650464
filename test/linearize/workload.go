package linearize

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Workload is an apiserver-like random mix of operations over a few hot
// keys: about 50% linearizable Gets, 25% CAS updates using the mod_revision
// the client last saw for the key (so some are stale and fail, as optimistic
// concurrency does), 15% Puts and 10% Deletes. Every written value is unique.
type Workload struct {
	// Clients are the connections to use; logical client i uses
	// Clients[i % len(Clients)], so passing one client per node spreads
	// the load over the nodes. Required.
	Clients []*clientv3.Client
	// Concurrency is the number of logical clients (goroutines, and rows in
	// the visualization). Default: len(Clients).
	Concurrency int
	// Keys is the key space. Default: 4 keys under "/linearize/".
	Keys []string
	// OpTimeout bounds each operation (default 2s). A timeout is an unknown
	// outcome for writes; keep it well above the expected latency, since
	// every unknown outcome makes the check more expensive.
	OpTimeout time.Duration
	// Pause is slept after an operation that returned an error, so that a
	// client does not spin against an unavailable node (default 20ms).
	Pause time.Duration
	// Seed makes the choice of operations reproducible (values always
	// differ between runs of Run only by client and sequence number).
	Seed uint64
	// Interval, when set, paces each client to at most one operation
	// per Interval, so that the history's size, and with it porcupine's
	// time, is bounded by the duration and not by how fast the store
	// answers (the check's cost grows much faster than the history).
	Interval time.Duration
}

// DefaultKeys returns n keys under "/linearize/".
func DefaultKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("/linearize/k%d", i)
	}
	return keys
}

// Run drives the workload for d (operations in flight then finish) or until
// ctx is done, recording into rec, and returns when every client has
// stopped. Clients are numbered from
// firstClient (so several workloads can share a recorder without sharing
// client ids).
func (w Workload) Run(ctx context.Context, rec *Recorder, firstClient int, d time.Duration) {
	if len(w.Clients) == 0 {
		panic("linearize: Workload.Clients is empty")
	}
	n := w.Concurrency
	if n <= 0 {
		n = len(w.Clients)
	}
	keys := w.Keys
	if len(keys) == 0 {
		keys = DefaultKeys(4)
	}
	opTimeout := w.OpTimeout
	if opTimeout <= 0 {
		opTimeout = 2 * time.Second
	}
	pause := w.Pause
	if pause <= 0 {
		pause = 20 * time.Millisecond
	}
	// Operations in flight at the deadline run to completion (under their
	// own OpTimeout); only cancelling ctx interrupts them.
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		id := firstClient + i
		cli := w.Clients[i%len(w.Clients)]
		rng := rand.New(rand.NewPCG(w.Seed, uint64(id)))
		wg.Go(func() { runClient(ctx, deadline, rec, cli, id, keys, opTimeout, pause, w.Interval, rng) })
	}
	wg.Wait()
}

func runClient(ctx context.Context, deadline time.Time, rec *Recorder, cli *clientv3.Client, id int, keys []string, opTimeout, pause, interval time.Duration, rng *rand.Rand) {
	seen := make(map[string]int64) // key -> mod_revision last observed (0: absent)
	next := time.Now()             // the earliest start of the next operation (interval)
	for seq := 0; ctx.Err() == nil && time.Now().Before(deadline); seq++ {
		if interval > 0 {
			if wait := time.Until(next); wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
			}
			next = time.Now().Add(interval)
		}
		key := keys[rng.IntN(len(keys))]
		val := fmt.Sprintf("c%d-%d", id, seq)
		opCtx, cancel := context.WithTimeout(ctx, opTimeout)
		var out Output
		var err error
		switch p := rng.IntN(100); {
		case p < 50:
			out, err = rec.Get(opCtx, cli, id, key)
			if err == nil {
				seen[key] = out.KV.ModRev // 0 when absent
			}
		case p < 75:
			out, err = rec.CAS(opCtx, cli, id, key, seen[key], val)
			if err == nil {
				if out.Succeeded {
					seen[key] = out.Rev
				} else {
					seen[key] = out.KV.ModRev
				}
			}
		case p < 90:
			out, err = rec.Put(opCtx, cli, id, key, val)
			if err == nil {
				seen[key] = out.Rev
			}
		default:
			_, err = rec.Delete(opCtx, cli, id, key)
			if err == nil {
				seen[key] = 0
			}
		}
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(pause):
			}
		}
	}
}
