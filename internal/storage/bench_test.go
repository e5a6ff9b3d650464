package storage

import (
	"encoding/binary"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// benchBatch writes one batch the size of a group commit: n keys of a
// pod-sized value and the log position, as the apply loop does.
func benchBatch(tx WriteTx, i, n int, val []byte) error {
	var k [8]byte
	for j := range n {
		binary.BigEndian.PutUint64(k[:], uint64(i*n+j))
		if err := tx.Put(BucketKey, k[:], val); err != nil {
			return err
		}
	}
	return tx.Put(BucketMeta, MetaConsistentIndex, PutUint64(uint64(i)))
}

// BenchmarkBatchWrite compares the two write paths per batch of 16 keys
// of 1 KiB, with fsync: Update commits each batch (two fdatasyncs and its
// pages), Apply leaves it to the background commit (the server makes the
// batch durable in its journal instead, not measured here).
func BenchmarkBatchWrite(b *testing.B) {
	val := make([]byte, 1024)
	for _, mode := range []string{"update", "apply"} {
		b.Run(mode, func(b *testing.B) {
			be, err := Open(filepath.Join(b.TempDir(), "db"), Options{BatchInterval: 100 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			defer be.Close()
			write := be.Update
			if mode == "apply" {
				write = be.Apply
			}
			b.ResetTimer()
			for i := range b.N {
				if err := write(func(tx WriteTx) error { return benchBatch(tx, i, 16, val) }); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// openReadBench opens a backend for a read benchmark holding 1,024 keys
// of 1 KiB (keys 0..1023), committed to bbolt or, with pending, all in
// the active layer. Closed with the benchmark.
func openReadBench(b *testing.B, pending bool) *Backend {
	b.Helper()
	be, err := Open(filepath.Join(b.TempDir(), "db"), Options{BatchInterval: -1, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	val := make([]byte, 1024)
	for i := range 64 {
		if err := be.Apply(func(tx WriteTx) error { return benchBatch(tx, i, 16, val) }); err != nil {
			b.Fatal(err)
		}
	}
	if !pending {
		if err := be.Commit(); err != nil {
			b.Fatal(err)
		}
	}
	return be
}

// BenchmarkViewWithPending measures a point read while a batch is pending
// (the active layer's clone, shared by readers until the next batch, is
// consulted) and with none.
func BenchmarkViewWithPending(b *testing.B) {
	for _, pending := range []bool{false, true} {
		name := map[bool]string{false: "committed", true: "pending"}[pending]
		b.Run(name, func(b *testing.B) {
			be := openReadBench(b, pending)
			key := make([]byte, 8)
			b.ResetTimer()
			for i := range b.N {
				binary.BigEndian.PutUint64(key, uint64(i%1024))
				err := be.View(func(tx ReadTx) error {
					if tx.Get(BucketKey, key) == nil {
						b.Fatalf("key %d missing", i%1024)
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkApplyBesideCommits applies batches of 16 keys of 1 KiB, with
// fsync, while commits of what was applied run beside them all the time
// (BatchInterval 2 ms, so a commit is due by the time one ends), and
// reports the Apply latency's percentiles: what a write on the server's
// apply loop waits for the data file.
func BenchmarkApplyBesideCommits(b *testing.B) {
	val := make([]byte, 1024)
	be, err := Open(filepath.Join(b.TempDir(), "db"), Options{BatchInterval: 2 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		start := time.Now()
		if err := be.Apply(func(tx WriteTx) error { return benchBatch(tx, i, 16, val) }); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(lat)
	at := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.5), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
	b.ReportMetric(at(1), "max-ns")
}

// BenchmarkViewParallel measures point reads from many goroutines at once
// (RunParallel, SetParallelism × GOMAXPROCS readers), as a server's Range
// handlers make them, over committed data and with a batch pending: the
// cost of opening a View when readers contend for it.
func BenchmarkViewParallel(b *testing.B) {
	for _, pending := range []bool{false, true} {
		for _, par := range []int{1, 64} {
			name := fmt.Sprintf("%s/par=%d", map[bool]string{false: "committed", true: "pending"}[pending], par)
			b.Run(name, func(b *testing.B) {
				be := openReadBench(b, pending)
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					key := make([]byte, 8)
					for i := 0; pb.Next(); i++ {
						binary.BigEndian.PutUint64(key, uint64(i%1024))
						err := be.View(func(tx ReadTx) error {
							if tx.Get(BucketKey, key) == nil {
								return fmt.Errorf("key %d missing", i%1024)
							}
							return nil
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}
