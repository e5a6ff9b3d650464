package twozone

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
)

// workload writes unique keys through both nodes and reads them back,
// recording every acknowledged write.
type workload struct {
	z      *zones
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	acked    map[string]string // key -> value of every acknowledged put
	failures int
	backward []string // revision that ran backwards for one client
	stale    []string // a linearizable read that missed an acknowledged write
}

// startWorkload runs writers clients per node until stop.
func startWorkload(z *zones, writers int) *workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{z: z, cancel: cancel, acked: map[string]string{}}
	for node := 0; node < 2; node++ {
		for c := 0; c < writers; c++ {
			cli := z.client(node)
			w.wg.Add(1)
			go w.writer(ctx, cli, fmt.Sprintf("%c%d", 'a'+node, c))
		}
	}
	return w
}

func (w *workload) writer(ctx context.Context, cli *clientv3.Client, id string) {
	defer w.wg.Done()
	var last int64
	for seq := 0; ctx.Err() == nil; seq++ {
		key, val := fmt.Sprintf("w/%s/%06d", id, seq), fmt.Sprintf("v%d", seq)
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		resp, err := cli.Put(octx, key, val)
		cancel()
		if err != nil {
			w.mu.Lock()
			w.failures++
			w.mu.Unlock()
			if !errors.Is(err, context.Canceled) {
				time.Sleep(50 * time.Millisecond)
			}
			continue
		}
		w.mu.Lock()
		w.acked[key] = val
		if resp.Header.Revision <= last {
			w.backward = append(w.backward, fmt.Sprintf("%s: %d after %d", key, resp.Header.Revision, last))
		}
		w.mu.Unlock()
		last = resp.Header.Revision
		// Read it back, linearizably, through the same node.
		octx, cancel = context.WithTimeout(ctx, 3*time.Second)
		g, err := cli.Get(octx, key)
		cancel()
		if err == nil && (len(g.Kvs) == 0 || string(g.Kvs[0].Value) != val) {
			w.mu.Lock()
			w.stale = append(w.stale, key)
			w.mu.Unlock()
		}
		if err == nil && g.Header.Revision < last {
			w.mu.Lock()
			w.backward = append(w.backward, fmt.Sprintf("read of %s at %d after write at %d", key, g.Header.Revision, last))
			w.mu.Unlock()
		}
	}
}

// count is the number of acknowledged writes so far.
func (w *workload) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

// waitProgress waits until n more writes are acknowledged.
func (w *workload) waitProgress(t *testing.T, n int, within time.Duration) {
	t.Helper()
	start := w.count()
	deadline := time.Now().Add(within)
	for w.count() < start+n {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume: %d acknowledged in %s", w.count()-start, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

// verify checks the history against node i: every acknowledged write is
// there with its value; no revision ran backwards; no read was stale.
func (w *workload) verify(t *testing.T, i int) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.backward) > 0 {
		t.Errorf("revisions ran backwards: %v", w.backward)
	}
	if len(w.stale) > 0 {
		t.Errorf("linearizable reads missed acknowledged writes: %v", w.stale)
	}
	cli := w.z.client(i)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, "w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading back: %v", err)
	}
	have := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	lost := 0
	for k, v := range w.acked {
		if have[k] != v {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged write %s=%s lost (have %q)", k, v, have[k])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(w.acked))
	}
	t.Logf("%d writes acknowledged, %d failed or unknown, all present on node %c", len(w.acked), w.failures, 'a'+i)
}

// converged checks that both nodes hold the same history.
func converged(t *testing.T, z *zones, leader int) {
	t.Helper()
	z.Converged(testutil.Zone(leader))
}

// isNoLeader reports etcd's "no leader" error.
func isNoLeader(err error) bool { return errors.Is(rpctypes.Error(err), rpctypes.ErrNoLeader) }
