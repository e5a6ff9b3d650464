package server_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/api"
	"github.com/dyad-db/dyad/internal/server"
)

// node is an in-process dyad node served over loopback gRPC.
type node struct {
	t      testing.TB
	cfg    server.Config
	srv    *server.Server
	cli    *clientv3.Client
	cancel context.CancelFunc
	done   chan struct{}
}

func startNode(t testing.TB, cfg server.Config) *node {
	t.Helper()
	return startNodeAfter(t, cfg, nil)
}

// startNodeAfter is startNode that calls opened, when set, between
// opening the node (server.New) and running it: the time a large data
// file takes to open.
func startNodeAfter(t testing.TB, cfg server.Config, opened func()) *node {
	t.Helper()
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if opened != nil {
		opened()
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{t: t, cfg: cfg, srv: srv, cancel: cancel, done: make(chan struct{})}
	g, _ := api.New(srv, api.Options{MaxRequestBytes: cfg.MaxRequestBytes, MaxTxnOps: cfg.MaxTxnOps})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); g.Serve(l) }()
	go func() {
		<-ctx.Done()
		g.Stop()
		wg.Wait()
		srv.Close()
		close(n.done)
	}()
	n.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{l.Addr().String()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

func (n *node) stop() {
	select {
	case <-n.done:
		return
	default:
	}
	n.cli.Close()
	n.cancel()
	<-n.done
}

func testConfig(t testing.TB) server.Config {
	cfg := server.Defaults()
	cfg.DataDir = t.TempDir()
	cfg.MinLeaseTTL = 1
	return cfg
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRestartKeepsDataLeasesAndRevisions(t *testing.T) {
	cfg := testConfig(t)
	n := startNode(t, cfg)
	c := ctx(t)
	lg, err := n.cli.Grant(c, 600)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if _, err := n.cli.Put(c, fmt.Sprintf("k%02d", i), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n.cli.Put(c, "leased", "x", clientv3.WithLease(lg.ID)); err != nil {
		t.Fatal(err)
	}
	if _, err := n.cli.Delete(c, "k00"); err != nil {
		t.Fatal(err)
	}
	before, err := n.cli.Get(c, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	n.stop()

	n2 := startNode(t, cfg)
	after, err := n2.cli.Get(c, "", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if after.Header.Revision != before.Header.Revision || len(after.Kvs) != len(before.Kvs) {
		t.Fatalf("after restart rev %d with %d keys, before rev %d with %d keys",
			after.Header.Revision, len(after.Kvs), before.Header.Revision, len(before.Kvs))
	}
	for i := range before.Kvs {
		if before.Kvs[i].String() != after.Kvs[i].String() {
			t.Fatalf("key %d differs: %v vs %v", i, before.Kvs[i], after.Kvs[i])
		}
	}
	ttl, err := n2.cli.TimeToLive(c, lg.ID, clientv3.WithAttachedKeys())
	if err != nil || ttl.TTL <= 0 || len(ttl.Keys) != 1 || string(ttl.Keys[0]) != "leased" {
		t.Fatalf("lease after restart: %+v %v", ttl, err)
	}
	if after.Header.RaftTerm <= before.Header.RaftTerm {
		t.Fatalf("term did not advance across restart: %d -> %d", before.Header.RaftTerm, after.Header.RaftTerm)
	}
	// Writes continue at the next revision.
	p, err := n2.cli.Put(c, "next", "v")
	if err != nil || p.Header.Revision != before.Header.Revision+1 {
		t.Fatalf("put after restart at rev %d, want %d (%v)", p.Header.Revision, before.Header.Revision+1, err)
	}
}

func TestLeaseExpiryDeletesKeysInOneRevision(t *testing.T) {
	n := startNode(t, testConfig(t))
	c := ctx(t)
	lg, err := n.cli.Grant(c, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a", "b", "c"} {
		if _, err := n.cli.Put(c, k, "v", clientv3.WithLease(lg.ID)); err != nil {
			t.Fatal(err)
		}
	}
	w := n.cli.Watch(c, "", clientv3.WithPrefix())
	deadline := time.After(10 * time.Second)
	for {
		select {
		case resp := <-w:
			if len(resp.Events) == 0 {
				continue
			}
			if len(resp.Events) != 3 {
				t.Fatalf("expiry produced %d events in one response, want 3", len(resp.Events))
			}
			rev := resp.Events[0].Kv.ModRevision
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete || ev.Kv.ModRevision != rev {
					t.Fatalf("event %v: want deletes all at revision %d", ev, rev)
				}
			}
			ttl, _ := n.cli.TimeToLive(c, lg.ID)
			if ttl.TTL != -1 {
				t.Fatalf("expired lease still reported with TTL %d", ttl.TTL)
			}
			return
		case <-deadline:
			t.Fatal("lease did not expire")
		}
	}
}

func TestQuotaRaisesNoSpaceAlarm(t *testing.T) {
	cfg := testConfig(t)
	cfg.QuotaBackendBytes = 256 * 1024
	n := startNode(t, cfg)
	c := ctx(t)
	val := string(make([]byte, 8*1024))
	// The data file grows only when the backend commits (in the
	// background, every 100 ms), as etcd's size is its newest commit's:
	// write until the quota refuses, for at most 20 s.
	var err error
	deadline := time.Now().Add(20 * time.Second)
	for i := 0; err == nil && time.Now().Before(deadline); i++ {
		_, err = n.cli.Put(c, fmt.Sprintf("k%d", i), val)
	}
	if err == nil || err.Error() != rpctypes.ErrNoSpace.Error() {
		t.Fatalf("filling the quota: err = %v, want %v", err, rpctypes.ErrNoSpace)
	}
	al, err := n.cli.AlarmList(c)
	if err != nil || len(al.Alarms) != 1 || al.Alarms[0].Alarm != pb.AlarmType_NOSPACE {
		t.Fatalf("alarms = %+v, %v", al, err)
	}
	if _, err := n.cli.Grant(c, 10); err == nil || err.Error() != rpctypes.ErrNoSpace.Error() {
		t.Fatalf("lease grant under NOSPACE: %v", err)
	}
	// Delete and compact still work under the alarm.
	dr, err := n.cli.Delete(c, "k", clientv3.WithPrefix())
	if err != nil || dr.Deleted == 0 {
		t.Fatalf("delete under NOSPACE: %v %v", dr, err)
	}
	if _, err := n.cli.Compact(c, dr.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compact under NOSPACE: %v", err)
	}
	if _, err := n.cli.Defragment(c, n.cli.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := n.cli.AlarmDisarm(c, &clientv3.AlarmMember{MemberID: al.Alarms[0].MemberID, Alarm: pb.AlarmType_NOSPACE}); err != nil {
		t.Fatal(err)
	}
	if _, err := n.cli.Put(c, "after", "ok"); err != nil {
		t.Fatalf("put after disarm: %v", err)
	}
}

func TestDefragReclaimsSpace(t *testing.T) {
	n := startNode(t, testConfig(t))
	c := ctx(t)
	val := string(make([]byte, 4096))
	var rev int64
	for i := 0; i < 500; i++ {
		p, err := n.cli.Put(c, fmt.Sprintf("k%d", i%50), val)
		if err != nil {
			t.Fatal(err)
		}
		rev = p.Header.Revision
	}
	if _, err := n.cli.Compact(c, rev, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	st, err := n.cli.Status(c, n.cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.cli.Defragment(c, n.cli.Endpoints()[0]); err != nil {
		t.Fatal(err)
	}
	st2, err := n.cli.Status(c, n.cli.Endpoints()[0])
	if err != nil {
		t.Fatal(err)
	}
	if st2.DbSize >= st.DbSize {
		t.Fatalf("defrag did not shrink the file: %d -> %d", st.DbSize, st2.DbSize)
	}
	g, err := n.cli.Get(c, "k", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || g.Count != 50 {
		t.Fatalf("after defrag: count %d, %v", g.Count, err)
	}
}

// TestConcurrentWritersShareCommits checks group commit: many concurrent
// writers all succeed, revisions are unique and dense, and fewer fsyncs
// than writes happen.
func TestConcurrentWritersShareCommits(t *testing.T) {
	cfg := testConfig(t)
	cfg.Metrics = server.NewMetrics(nil)
	n := startNode(t, cfg)
	c := ctx(t)
	const writers, each = 32, 20
	revs := make(chan int64, writers*each)
	var wg sync.WaitGroup
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				p, err := n.cli.Put(c, fmt.Sprintf("w%d/%d", w, i), "v")
				if err != nil {
					t.Error(err)
					return
				}
				revs <- p.Header.Revision
			}
		}(w)
	}
	wg.Wait()
	close(revs)
	seen := map[int64]bool{}
	for r := range revs {
		if seen[r] {
			t.Fatalf("revision %d acknowledged twice", r)
		}
		seen[r] = true
	}
	for r := int64(2); r < 2+writers*each; r++ {
		if !seen[r] {
			t.Fatalf("revision %d missing: revisions are not dense", r)
		}
	}
	var m dto.Metric
	if err := cfg.Metrics.BatchSize.Write(&m); err != nil {
		t.Fatal(err)
	}
	commits := m.GetHistogram().GetSampleCount()
	if commits >= writers*each {
		t.Fatalf("%d commits for %d concurrent writes: no group commit", commits, writers*each)
	}
	t.Logf("%d writes in %d commits", writers*each, commits)
}
