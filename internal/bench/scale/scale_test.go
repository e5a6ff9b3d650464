package scale

import (
	"strings"
	"testing"
	"time"
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
// etcd-1, dyad-pair with etcd-3), a missing baseline gives no ratio, and a
// failed target is shown as failed.
func TestSection(t *testing.T) {
	r := &Result{Config: Config{Objects: 1000, ObjectSize: 2048, Watchers: 10, Writers: 2, Listers: 1, PageSize: 500, Duration: time.Second}, Rows: []Row{
		{Target: "dyad", Serve: 2 * time.Second, PutRate: 300},
		{Target: "etcd-1", Serve: 4 * time.Second, PutRate: 200},
		{Target: "dyad-pair", Serve: time.Second, PutRate: 100},
		{Target: "etcd-3", Err: "start: no etcd"},
	}}
	var b strings.Builder
	if err := r.Markdown(&b); err != nil {
		t.Fatal(err)
	}
	md := b.String()
	for _, want := range []string{
		"| figure | dyad | etcd-1 | dyad-pair | etcd-3 | dyad ÷ etcd-1 | dyad-pair ÷ etcd-3 |",
		"| time to serve after restart | 2.00 s | 4.00 s | 1.00 s | failed | 0.50× | — |",
		"| put rate, no watcher | 300/s | 200/s | 100/s | failed | 1.50× | — |",
		"etcd-3 failed: start: no etcd",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("section lacks %q:\n%s", want, md)
		}
	}
}
