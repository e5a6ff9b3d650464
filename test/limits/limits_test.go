package limits

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// envTarget names the server under test: dyad by default, or an etcd
// binary ("etcd-3.6") to take the same measurements of etcd.
const envTarget = "DYAD_LIMITS_TARGET"

func start(t *testing.T, opts ...testutil.Option) *testutil.Server {
	t.Helper()
	return testutil.Start(t, testutil.TargetFromEnv(envTarget), opts...)
}

// rssKiB reads a process's anonymous resident memory (RssAnon: heap and
// stacks, leaving out the mapped data file, which the kernel may evict) and
// the peak of its whole resident set (VmHWM).
func rssKiB(t *testing.T, pid int) (rss, peak int64) {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "RssAnon:":
			rss = v
		case "VmHWM:":
			peak = v
		}
	}
	return rss, peak
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func sameErr(t *testing.T, what string, err, want error) {
	t.Helper()
	code, msg := errCode(err)
	w := status.Convert(want)
	if err == nil || code != w.Code() || msg != w.Message() {
		t.Errorf("%s: got %v, want etcd's %v", what, err, want)
	}
}

// errCode is the gRPC code and message of err; clientv3 turns etcd's
// errors into rpctypes.EtcdError.
func errCode(err error) (codes.Code, string) {
	if ee, ok := err.(rpctypes.EtcdError); ok {
		return ee.Code(), ee.Error()
	}
	st := status.Convert(err)
	return st.Code(), st.Message()
}

// checkAll checks that every acknowledged key is there with its value.
func checkAll(t *testing.T, c context.Context, cli *clientv3.Client, prefix string, acked map[string]string) {
	t.Helper()
	resp, err := cli.Get(c, prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("server no longer answers: %v", err)
	}
	got := map[string]string{}
	for _, kv := range resp.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	for k, v := range acked {
		if got[k] != v {
			t.Fatalf("acknowledged %q lost or changed (have %d of %d keys)", k, len(got), len(acked))
		}
	}
}

// TestFlagLimits starts dyad with small --max-request-bytes and
// --max-txn-ops and checks each limit gives etcd's error, including in
// nested txns, while writes at the limit succeed and none is lost.
func TestFlagLimits(t *testing.T) {
	srv := start(t, testutil.WithArgs("--max-request-bytes=4096", "--max-txn-ops=4"))
	cli := srv.Client(t)
	c := ctx(t, time.Minute)
	acked := map[string]string{}
	put := func(k, v string) error {
		_, err := cli.Put(c, k, v)
		if err == nil {
			acked[k] = v
		}
		return err
	}
	if err := put("l/fits", strings.Repeat("v", 4000)); err != nil {
		t.Fatalf("put under the limit: %v", err)
	}
	sameErr(t, "put over --max-request-bytes", put("l/big", strings.Repeat("v", 4097)), rpctypes.ErrGRPCRequestTooLarge)
	// gRPC's own limit is --max-request-bytes + 512 KiB.
	if code, msg := errCode(put("l/huge", strings.Repeat("v", 600<<10))); code != codes.ResourceExhausted || !strings.HasSuffix(msg, " vs. 528384)") {
		t.Errorf("put over the gRPC limit: %v %q, want gRPC's ResourceExhausted at 4096+512 KiB", code, msg)
	}
	ops := func(n int, prefix string) []clientv3.Op {
		var out []clientv3.Op
		for i := 0; i < n; i++ {
			out = append(out, clientv3.OpPut(fmt.Sprintf("%s%d", prefix, i), "x"))
		}
		return out
	}
	if _, err := cli.Txn(c).Then(ops(4, "l/t")...).Commit(); err != nil {
		t.Fatalf("txn at --max-txn-ops: %v", err)
	}
	for i := 0; i < 4; i++ {
		acked[fmt.Sprintf("l/t%d", i)] = "x"
	}
	_, err := cli.Txn(c).Then(ops(5, "l/u")...).Commit()
	sameErr(t, "txn over --max-txn-ops", err, rpctypes.ErrGRPCTooManyOps)
	nested := clientv3.OpTxn(nil, ops(3, "l/n"), nil)
	_, err = cli.Txn(c).Then(clientv3.OpPut("l/o", "x"), nested).Commit()
	sameErr(t, "nested txn over what is left of --max-txn-ops", err, rpctypes.ErrGRPCTooManyOps)
	// dyad logs every txn, read-only ones too, so a read-only txn over the
	// limit is refused (etcd serves those without raft and its check).
	_, err = cli.Txn(c).If(clientv3.Compare(clientv3.Value("l/fits"), "=", strings.Repeat("c", 5000))).Commit()
	if srv.Kind() == testutil.KindDyad {
		sameErr(t, "read-only txn over --max-request-bytes", err, rpctypes.ErrGRPCRequestTooLarge)
	} else if err != nil {
		t.Errorf("etcd refused a read-only txn over --max-request-bytes: %v", err)
	}
	// Reads are not size-checked, as in etcd.
	if _, err := cli.Get(c, strings.Repeat("k", 5000)); err != nil {
		t.Errorf("get with a key over the limit: %v", err)
	}
	checkAll(t, c, cli, "l/", acked)
}

// TestLeaseFlood grants thousands of leases at once with keys attached,
// then revokes them all: every grant is answered, the lease list is exact,
// memory stays bounded and the revocations delete exactly their keys.
func TestLeaseFlood(t *testing.T) {
	const leases, workers = 2000, 16
	srv := start(t)
	cli := srv.Client(t)
	c := ctx(t, 3*time.Minute)
	rss0, _ := rssKiB(t, srv.Pid())
	ids := make([]clientv3.LeaseID, leases)
	g, gc := errgroup.WithContext(c)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for i := w; i < leases; i += workers {
				lg, err := cli.Grant(gc, 600)
				if err != nil {
					return fmt.Errorf("grant %d: %w", i, err)
				}
				ids[i] = lg.ID
				if _, err := cli.Put(gc, fmt.Sprintf("lf/%05d", i), "x", clientv3.WithLease(lg.ID)); err != nil {
					return fmt.Errorf("put %d: %w", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	rss1, peak := rssKiB(t, srv.Pid())
	list, err := cli.Leases(c)
	if err != nil || len(list.Leases) != leases {
		t.Fatalf("Leases: %d leases, %v; want %d", len(list.Leases), err, leases)
	}
	t.Logf("FIGURE lease flood: %d leases+keys granted by %d clients; anon RSS %d KiB -> %d KiB (peak total RSS %d KiB), %.1f KiB per lease",
		leases, workers, rss0, rss1, peak, float64(rss1-rss0)/leases)
	if rss1-rss0 > 256<<10 {
		t.Errorf("RSS grew by %d KiB for %d leases", rss1-rss0, leases)
	}
	g, gc = errgroup.WithContext(c)
	for w := 0; w < workers; w++ {
		g.Go(func() error {
			for i := w; i < leases; i += workers {
				if _, err := cli.Revoke(gc, ids[i]); err != nil {
					return fmt.Errorf("revoke %d: %w", i, err)
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(c, "lf/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Fatalf("after revoking every lease: %d keys left, %v", resp.Count, err)
	}
	_, err = cli.Revoke(c, ids[0])
	sameErr(t, "revoking a revoked lease", err, rpctypes.ErrGRPCLeaseNotFound)
}

// TestWatchFlood opens many streams with many watchers each: every watcher
// is created, one write reaches every one of them, memory per watcher is
// bounded, and the server keeps answering.
func TestWatchFlood(t *testing.T) {
	const streams, perStream = 40, 100
	srv := start(t)
	cli := srv.Client(t)
	c := ctx(t, 3*time.Minute)
	rss0, _ := rssKiB(t, srv.Pid())
	conn, err := grpc.NewClient(srv.HostPort(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	wc := pb.NewWatchClient(conn)
	var all []pb.Watch_WatchClient
	for s := 0; s < streams; s++ {
		st, err := wc.Watch(c)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, st)
		for i := 0; i < perStream; i++ {
			req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("wf/"), RangeEnd: []byte("wf0")}}}
			if err := st.Send(req); err != nil {
				t.Fatal(err)
			}
		}
	}
	for s, st := range all {
		for i := 0; i < perStream; i++ {
			resp, err := st.Recv()
			if err != nil || !resp.Created || resp.Canceled {
				t.Fatalf("stream %d watcher %d: %+v %v", s, i, resp, err)
			}
		}
	}
	rss1, _ := rssKiB(t, srv.Pid())
	put, err := cli.Put(c, "wf/k", "v")
	if err != nil {
		t.Fatal(err)
	}
	for s, st := range all {
		seen := 0
		for seen < perStream {
			resp, err := st.Recv()
			if err != nil {
				t.Fatalf("stream %d: %v", s, err)
			}
			for _, ev := range resp.Events {
				if ev.Kv.ModRevision != put.Header.Revision {
					t.Fatalf("stream %d: event at %d, want %d", s, ev.Kv.ModRevision, put.Header.Revision)
				}
				seen++
			}
		}
	}
	rss2, peak := rssKiB(t, srv.Pid())
	n := streams * perStream
	t.Logf("FIGURE watch flood: %d streams x %d watchers = %d; anon RSS %d KiB -> %d KiB after create (%.2f KiB per watcher), %d KiB after one event to all (peak total RSS %d KiB)",
		streams, perStream, n, rss0, rss1, float64(rss1-rss0)/float64(n), rss2, peak)
	if rss2-rss0 > 256<<10 {
		t.Errorf("RSS grew by %d KiB for %d watchers", rss2-rss0, n)
	}
	if _, err := cli.Get(c, "wf/k"); err != nil {
		t.Fatalf("server no longer answers: %v", err)
	}
}

// TestSlowWatcher keeps a watch stream that never reads while clients
// write tens of megabytes: the server's memory must grow no more than the
// same writes make it grow without the stalled watcher (the stream's events
// wait in the store, not in memory), writes keep being acknowledged, and
// once the watcher reads it gets every event in order with no gap.
func TestSlowWatcher(t *testing.T) {
	const writes, workers, valueSize = 2000, 8, 8 << 10
	srv := start(t)
	cli := srv.Client(t)
	c := ctx(t, 4*time.Minute)
	value := strings.Repeat("v", valueSize)
	acked := map[string]string{}
	var mu sync.Mutex
	// load writes the batch and returns the highest anon RSS sampled.
	load := func(prefix string) int64 {
		maxRSS, _ := rssKiB(t, srv.Pid())
		g, gc := errgroup.WithContext(c)
		for w := 0; w < workers; w++ {
			g.Go(func() error {
				for i := w; i < writes; i += workers {
					k := fmt.Sprintf("%s%05d", prefix, i)
					if _, err := cli.Put(gc, k, value); err != nil {
						return fmt.Errorf("put %s: %w", k, err)
					}
					mu.Lock()
					acked[k] = value
					if i%100 == 0 {
						if r, _ := rssKiB(t, srv.Pid()); r > maxRSS {
							maxRSS = r
						}
					}
					mu.Unlock()
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			t.Fatal(err)
		}
		return maxRSS
	}
	written := int64(writes) * valueSize >> 10

	// Control: the same load with no watcher.
	base0, _ := rssKiB(t, srv.Pid())
	base1 := load("ctl/")
	control := base1 - base0

	// A raw stream with a fixed 64 KiB flow-control window (no dynamic
	// growth): once that is full the server cannot send any more.
	conn, err := grpc.NewClient(srv.HostPort(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := pb.NewWatchClient(conn).Watch(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte("sw/"), RangeEnd: []byte("sw0")}}}); err != nil {
		t.Fatal(err)
	}
	if resp, err := st.Recv(); err != nil || !resp.Created {
		t.Fatalf("create: %+v %v", resp, err)
	}
	// Two stalled batches: if the stalled stream's events were held in
	// memory, the second batch would grow the heap as much as the first.
	stalled0, _ := rssKiB(t, srv.Pid())
	stalled1 := load("sw/a")
	stalled2 := load("sw/b")
	_, peak := rssKiB(t, srv.Pid())
	t.Logf("FIGURE slow watcher: %d puts of %d KiB (%d KiB) per batch; anon RSS without a watcher %d -> max %d KiB (+%d); with one watcher that never reads %d -> max %d KiB after batch 1 (+%d), max %d KiB after batch 2 (+%d more); peak total RSS %d KiB",
		writes, valueSize>>10, written, base0, base1, control, stalled0, stalled1, stalled1-stalled0, stalled2, stalled2-stalled1, peak)
	// Compared with a batch written with no watcher at all (etcd, for one,
	// keeps its recent raft log in memory, so any batch grows its heap).
	if stalled2-stalled1 > control+written/4 {
		t.Errorf("anon RSS kept growing with a stalled watcher: +%d KiB for the second %d KiB batch (+%d KiB for the first, +%d KiB with no watcher): its events are buffered in memory",
			stalled2-stalled1, written, stalled1-stalled0, control)
	}
	checkAll(t, c, cli, "", acked)
	// Now read: every write arrives once, in revision order.
	last, got := int64(0), 0
	for got < 2*writes {
		resp, err := st.Recv()
		if err != nil {
			t.Fatalf("after %d events: %v", got, err)
		}
		if resp.Canceled {
			t.Fatalf("watch canceled after %d events: %q", got, resp.CancelReason)
		}
		for _, ev := range resp.Events {
			if ev.Kv.ModRevision <= last {
				t.Fatalf("event at revision %d after %d", ev.Kv.ModRevision, last)
			}
			last = ev.Kv.ModRevision
			got++
		}
	}
	after, _ := rssKiB(t, srv.Pid())
	t.Logf("FIGURE slow watcher: all %d events then delivered in order; anon RSS %d KiB after draining", got, after)
}
