package api

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	"github.com/dyad-db/dyad/internal/server"
)

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPutOverGRPC measures puts of 256-byte values through the gRPC
// server by 64 clients, each on a connection of its own (as etcd's
// benchmark tool runs with --conns 64 --clients 64), on a single node
// without fsync, so that the request path, not the disk, is what is
// measured: with the gRPC server's kept workers (the default) and with a
// goroutine per RPC. cpu-us/op is the process's CPU time per put, the
// clients' included.
func BenchmarkPutOverGRPC(b *testing.B) {
	for _, c := range []struct {
		name    string
		workers int
	}{{"goroutine-per-rpc", -1}, {"workers", 0}} {
		b.Run(c.name, func(b *testing.B) { benchPutOverGRPC(b, c.workers, 64) })
	}
}

// benchNode starts a single node without fsync (the request path, not the
// disk, is measured) and its gRPC server on an in-memory listener, both
// stopped when the benchmark ends. dial opens a client connection to it,
// closed before them.
func benchNode(b *testing.B, opts Options) (ctx context.Context, dial func() *grpc.ClientConn) {
	cfg := server.Defaults()
	cfg.DataDir = b.TempDir()
	cfg.UnsafeNoFsync = true
	srv, err := server.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	opts.MaxRequestBytes, opts.MaxTxnOps = cfg.MaxRequestBytes, cfg.MaxTxnOps
	g, _ := New(srv, opts)
	l := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); _ = g.Serve(l) }()
	b.Cleanup(func() {
		cancel()
		g.Stop()
		wg.Wait()
		srv.Close()
	})
	return ctx, func() *grpc.ClientConn {
		conn, err := grpc.NewClient("passthrough:///bufconn",
			grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return l.Dial() }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() }) // runs before the node's
		return conn
	}
}

func benchPutOverGRPC(b *testing.B, workers, clients int) {
	ctx, dial := benchNode(b, Options{StreamWorkers: workers})
	kvs := make([]pb.KVClient, clients)
	for i := range kvs {
		kvs[i] = pb.NewKVClient(dial())
		if _, err := kvs[i].Put(ctx, &pb.PutRequest{Key: []byte("warm"), Value: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
	val := make([]byte, 256)
	b.ReportAllocs()
	cpu := processCPU(b)
	b.ResetTimer()
	putAll(b, ctx, kvs, func(i int64) string { return fmt.Sprintf("key/%08d", i) }, val)
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-us/op")
}

// putAll makes b.N puts of val, each client in a goroutine of its own
// taking the next number i (from 1) and putting key(i), and returns once
// all are answered.
func putAll(b *testing.B, ctx context.Context, kvs []pb.KVClient, key func(i int64) string, val []byte) {
	var left, n atomic.Int64
	left.Store(int64(b.N))
	errc := make(chan error, len(kvs))
	for _, kv := range kvs {
		go func() { // joined below: each sends exactly once on errc
			for left.Add(-1) >= 0 {
				if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(key(n.Add(1))), Value: val}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range kvs {
		if err := <-errc; err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWatchFanOutOverGRPC is the scale bench's watched phase in one
// process: 1,000 watchers, ten on each of 100 namespace prefixes, over 16
// watch streams of their own connections, and 16 writers putting 2 KiB
// objects into random namespaces on another; each op is one put, whose
// event reaches ten watchers. The op ends when every event is delivered.
// Run with the server's codec and with gRPC's; cpu-us/op is the process's
// CPU time per put, clients' decoding included.
func BenchmarkWatchFanOutOverGRPC(b *testing.B) {
	for _, c := range []struct {
		name      string
		grpcCodec bool
	}{{"grpc-codec", true}, {"dyad-codec", false}} {
		b.Run(c.name, func(b *testing.B) { benchWatchFanOut(b, c.grpcCodec) })
	}
}

func benchWatchFanOut(b *testing.B, grpcCodec bool) {
	const (
		watchers   = 1000
		namespaces = 100
		streams    = 16
		writers    = 16
	)
	nodeCtx, dial := benchNode(b, Options{grpcCodec: grpcCodec})
	ctx, cancel := context.WithCancel(nodeCtx)
	var readers sync.WaitGroup // the watch streams' readers
	defer func() { cancel(); readers.Wait() }()
	prefix := func(ns int) string { return fmt.Sprintf("/registry/pods/ns-%03d/", ns) }
	var delivered atomic.Int64
	ws := make([]pb.Watch_WatchClient, streams)
	for i := range ws {
		w, err := pb.NewWatchClient(dial()).Watch(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ws[i] = w
	}
	for i := range watchers {
		p := prefix(i % namespaces)
		end := []byte(p)
		end[len(end)-1]++
		req := &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: &pb.WatchCreateRequest{Key: []byte(p), RangeEnd: end}}}
		if err := ws[i%streams].Send(req); err != nil {
			b.Fatal(err)
		}
	}
	created := make(chan struct{}, watchers)
	for _, w := range ws {
		readers.Go(func() {
			for {
				resp, err := w.Recv()
				if err != nil {
					return // the benchmark ended
				}
				if resp.Created {
					created <- struct{}{}
				}
				delivered.Add(int64(len(resp.Events)))
			}
		})
	}
	for range watchers {
		<-created
	}
	kv := pb.NewKVClient(dial())
	kvs := make([]pb.KVClient, writers)
	for i := range kvs {
		kvs[i] = kv
	}
	val := make([]byte, 2048)
	b.ReportAllocs()
	cpu := processCPU(b)
	b.ResetTimer()
	putAll(b, ctx, kvs, func(i int64) string { return fmt.Sprintf("%spod-%d", prefix(int(i%namespaces)), i%500) }, val)
	want := int64(b.N) * watchers / namespaces
	for deadline := time.Now().Add(time.Minute); delivered.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d events delivered a minute after the last put", delivered.Load(), want)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-us/op")
}
