package scale

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
)

// TestDistOf: nearest-rank percentiles of the exact values.
func TestDistOf(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	d := distOf(ds)
	if d.N != 100 || d.P50 != 50*time.Millisecond || d.P99 != 99*time.Millisecond || d.Max != 100*time.Millisecond {
		t.Fatalf("distOf(1..100 ms) = %+v", d)
	}
	if (distOf(nil) != Dist{}) {
		t.Fatal("distOf(nil) is not empty")
	}
}

// TestSection: each dyad target is compared with its etcd (dyad with
// etcd-1, dyad-pair with etcd-3), a missing baseline gives no ratio, a
// failed target is shown as failed, and the paced phase's figures and rate
// are shown beside the closed-loop ones.
func TestSection(t *testing.T) {
	r := &Result{Config: Config{Objects: 1000, ObjectSize: 2048, Watchers: 10, Writers: 2, Listers: 1, PageSize: 500, Duration: time.Second, WatchRate: 1000}, Rows: []Row{
		{Target: "dyad", Serve: 2 * time.Second, PutRate: 300, PacedLag: Dist{P99: 2 * time.Millisecond}},
		{Target: "etcd-1", Serve: 4 * time.Second, PutRate: 200, PacedLag: Dist{P99: 4 * time.Millisecond}},
		{Target: "dyad-pair", Serve: time.Second, PutRate: 100},
		{Target: "etcd-3", Err: "start: no etcd"},
	}}
	md := sectionOf(t, r)
	for _, want := range []string{
		"| figure | dyad | etcd-1 | dyad-pair | etcd-3 | dyad ÷ etcd-1 | dyad-pair ÷ etcd-3 |",
		"| time to serve after restart | 2.00 s | 4.00 s | 1.00 s | failed | 0.50× | — |",
		"| put rate, no watcher | 300/s | 200/s | 100/s | failed | 1.50× | — |",
		"| paced: watch lag p99 | 2.00 ms | 4.00 ms | 0 µs | failed | 0.50× | — |",
		"paced (1000 puts/s issued open-loop",
		"etcd-3 failed: start: no etcd",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
}

// TestRetryPutAfterTimeout: a put answered "request timed out", as the
// client hands it back, is retried and counted as such; any other
// request is not retried after it, and the section names the count.
func TestRetryPutAfterTimeout(t *testing.T) {
	timeout := rpctypes.Error(rpctypes.ErrGRPCTimeout) // what clientv3 returns
	if transient(timeout) {
		t.Fatal("request timed out counts as transient: the test below proves nothing")
	}
	b := &bench{}
	calls := 0
	op := func(context.Context) error {
		calls++
		if calls == 1 {
			return timeout
		}
		return nil
	}
	if err := b.retryPut(context.Background(), op); err != nil || calls != 2 {
		t.Fatalf("retryPut: %v after %d calls, want success after 2", err, calls)
	}
	if b.retries.Load() != 1 || b.timedOut.Load() != 1 {
		t.Fatalf("retries %d, timed out %d; want 1 and 1", b.retries.Load(), b.timedOut.Load())
	}
	calls = 0
	if err := b.retry(context.Background(), op); !errors.Is(err, timeout) || calls != 1 {
		t.Fatalf("retry: %v after %d calls, want the timeout after 1", err, calls)
	}
	r := &Result{Config: Config{Objects: 1000, ObjectSize: 2048, Watchers: 10, Writers: 2, Listers: 1, PageSize: 500, Duration: time.Second},
		Rows: []Row{{Target: "dyad-pair", Retries: 3, TimedOut: 1}}}
	md := sectionOf(t, r)
	if want := `dyad-pair: 3 requests retried after a transient error (no leader, unavailable; 1 of them puts answered "request timed out").`; !strings.Contains(md, want) {
		t.Errorf("section lacks %q:\n%s", want, md)
	}
}

// TestSectionRounds: a target measured in several rounds shows the median
// of the rounds that did not fail with their range, the ratio compares
// medians, and a failed round is named by its number.
func TestSectionRounds(t *testing.T) {
	r := &Result{Config: Config{Objects: 1000, ObjectSize: 2048, Watchers: 10, Writers: 2, Listers: 1, PageSize: 500, Duration: time.Second}, Rows: []Row{
		{Target: "dyad", Round: 1, Serve: 9 * time.Second, PutRate: 300},
		{Target: "etcd-1", Round: 1, Serve: 4 * time.Second, PutRate: 100},
		{Target: "dyad", Round: 2, Serve: 1 * time.Second, PutRate: 500},
		{Target: "etcd-1", Round: 2, Err: "load: no leader"},
		{Target: "dyad", Round: 3, Serve: 2 * time.Second, PutRate: 400},
		{Target: "etcd-1", Round: 3, Serve: 2 * time.Second, PutRate: 200},
	}}
	md := sectionOf(t, r)
	for _, want := range []string{
		"| figure | dyad | etcd-1 | dyad ÷ etcd-1 | dyad-pair ÷ etcd-3 |",
		// dyad: median of 9, 1, 2 s; etcd-1: of 4 and 2 s (round 2
		// failed), the lower middle of an even count.
		"| time to serve after restart | 2.00 s (1.00 s–9.00 s) | 2.00 s (2.00 s–4.00 s) | 1.00× | — |",
		"| put rate, no watcher | 400/s (300/s–500/s) | 100/s (100/s–200/s) | 4.00× | — |",
		"every figure is the median of a target's rounds",
		"etcd-1 (round 2) failed: load: no leader",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(md, "failed |") {
		t.Errorf("a target with a round that did not fail is shown as failed:\n%s", md)
	}
}

// sectionOf renders r's Markdown section.
func sectionOf(t *testing.T, r *Result) string {
	t.Helper()
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
