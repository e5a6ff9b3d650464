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

func benchPutOverGRPC(b *testing.B, workers, clients int) {
	cfg := server.Defaults()
	cfg.DataDir = b.TempDir()
	cfg.UnsafeNoFsync = true
	srv, err := server.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	g, _ := New(srv, Options{MaxRequestBytes: cfg.MaxRequestBytes, MaxTxnOps: cfg.MaxTxnOps, StreamWorkers: workers})
	l := bufconn.Listen(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); srv.Run(ctx) }()
	go func() { defer wg.Done(); _ = g.Serve(l) }()
	defer func() {
		cancel()
		g.Stop()
		wg.Wait()
		srv.Close()
	}()
	kvs := make([]pb.KVClient, clients)
	for i := range kvs {
		conn, err := grpc.NewClient("passthrough:///bufconn",
			grpc.WithContextDialer(func(context.Context, string) (net.Conn, error) { return l.Dial() }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		defer conn.Close()
		kvs[i] = pb.NewKVClient(conn)
		if _, err := kvs[i].Put(ctx, &pb.PutRequest{Key: []byte("warm"), Value: []byte("x")}); err != nil {
			b.Fatal(err)
		}
	}
	val := make([]byte, 256)
	var left, n atomic.Int64
	left.Store(int64(b.N))
	errc := make(chan error, clients)
	b.ReportAllocs()
	cpu := processCPU(b)
	b.ResetTimer()
	for _, kv := range kvs {
		go func() { // joined below: each sends exactly once on errc
			for left.Add(-1) >= 0 {
				k := fmt.Sprintf("key/%08d", n.Add(1))
				if _, err := kv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
					errc <- err
					return
				}
			}
			errc <- nil
		}()
	}
	for range kvs {
		if err := <-errc; err != nil {
			b.Error(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-us/op")
}
