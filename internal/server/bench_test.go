package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/server"
)

// These benchmarks drive the node directly (no gRPC) with real fsync, so
// they measure the write path: validation, apply, group commit, watch
// notification. b.RunParallel's goroutines are the concurrent clients
// (GOMAXPROCS × -cpu × SetParallelism).

func benchNode(b *testing.B) *server.Server {
	cfg := server.Defaults()
	cfg.DataDir = b.TempDir()
	srv, err := server.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { srv.Run(ctx); close(done) }()
	b.Cleanup(func() { cancel(); <-done; srv.Close() })
	<-srv.Ready()
	return srv
}

func benchPut(b *testing.B, parallel int) {
	srv := benchNode(b)
	val := make([]byte, 256)
	var n atomic.Int64
	b.SetParallelism(parallel)
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			k := fmt.Sprintf("key/%d", n.Add(1)%10000)
			if _, err := srv.Put(context.Background(), &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkPut1(b *testing.B)  { benchPut(b, 1) }
func BenchmarkPut64(b *testing.B) { benchPut(b, 32) } // 32 × GOMAXPROCS(2) = 64 clients

func BenchmarkRange(b *testing.B) {
	srv := benchNode(b)
	for i := 0; i < 1000; i++ {
		srv.Put(context.Background(), &pb.PutRequest{Key: []byte(fmt.Sprintf("key/%04d", i)), Value: make([]byte, 256)})
	}
	b.ResetTimer()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			r, err := srv.Range(context.Background(), &pb.RangeRequest{Key: []byte("key/0500")})
			if err != nil || len(r.Kvs) != 1 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkTxnOptimistic is Kubernetes' update: compare mod revision, put on
// success, read on failure.
func BenchmarkTxnOptimistic(b *testing.B) {
	srv := benchNode(b)
	key := []byte("/registry/configmaps/default/bench")
	resp, err := srv.Put(context.Background(), &pb.PutRequest{Key: key, Value: []byte("v")})
	if err != nil {
		b.Fatal(err)
	}
	mod := resp.Header.Revision
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t, err := srv.Txn(context.Background(), &pb.TxnRequest{
			Compare: []*pb.Compare{{Key: key, Target: pb.Compare_MOD, Result: pb.Compare_EQUAL, TargetUnion: &pb.Compare_ModRevision{ModRevision: mod}}},
			Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: key, Value: []byte(fmt.Sprint(i))}}}},
			Failure: []*pb.RequestOp{{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{Key: key}}}},
		})
		if err != nil || !t.Succeeded {
			b.Fatal(err)
		}
		mod = t.Header.Revision
	}
}
