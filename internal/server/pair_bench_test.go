package server_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// ackWait is the primary's total wait for acknowledgements, in seconds, and
// the number of batches acknowledged (its dyad_replication_ack_seconds).
func ackWait(b *testing.B, n *node) (float64, uint64) {
	var m dto.Metric
	if err := n.cfg.Metrics.LagSeconds.Write(&m); err != nil {
		b.Fatal(err)
	}
	return m.GetHistogram().GetSampleSum(), m.GetHistogram().GetSampleCount()
}

// processCPU is the CPU time (user and system) this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPairPut measures puts of 256-byte values on an in-memory pair
// (both nodes in this process, real fsyncs, no gRPC), called on the
// primary directly, by one client and by 64 (goroutines sharing b.N). Besides the time and the
// allocations per put it reports cpu-us/op: the CPU time both nodes
// (and the benchmark's clients) used per put, which is what the write
// path costs on a machine whose cores are all busy; and ack-us, the
// primary's mean wait per batch from its own flush to the release by the
// replica's ack.
func BenchmarkPairPut(b *testing.B) {
	a, _ := benchPair(b)
	ctx := context.Background()
	val := make([]byte, 256)
	var n atomic.Int64
	for _, clients := range []int{1, 64} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.ReportAllocs()
			var left atomic.Int64
			left.Store(int64(b.N))
			errc := make(chan error, clients)
			cpu := processCPU(b)
			ackSum, acks := ackWait(b, a)
			b.ResetTimer()
			for c := 0; c < clients; c++ {
				go func() { // joined below: each sends exactly once on errc
					for left.Add(-1) >= 0 {
						k := fmt.Sprintf("key/%08d", n.Add(1))
						if _, err := a.srv.Put(ctx, &pb.PutRequest{Key: []byte(k), Value: val}); err != nil {
							errc <- err
							return
						}
					}
					errc <- nil
				}()
			}
			for c := 0; c < clients; c++ {
				if err := <-errc; err != nil {
					b.Error(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64((processCPU(b)-cpu).Microseconds())/float64(b.N), "cpu-us/op")
			if sum, n := ackWait(b, a); n > acks {
				b.ReportMetric((sum-ackSum)/float64(n-acks)*1e6, "ack-us")
			}
		})
	}
}
