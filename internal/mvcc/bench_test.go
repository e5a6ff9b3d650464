package mvcc

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/storage"
)

// fill writes n keys with valSize-byte values, one revision each, in
// batches of 10,000 keys per storage transaction.
func fill(b *testing.B, be *storage.Backend, s *Store, n, valSize int) {
	b.Helper()
	val := make([]byte, valSize)
	for i := 0; i < n; {
		err := be.Update(func(tx storage.WriteTx) error {
			for j := 0; j < 10000 && i < n; j, i = j+1, i+1 {
				w := s.Write(tx)
				if _, err := w.Put([]byte(fmt.Sprintf("/registry/pods/ns/%08d", i)), val, 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	_, cur, _ := s.Revs()
	s.MarkDurable(cur)
}

// BenchmarkOpen measures restart time: rebuilding the index from a data file
// of DYAD_BENCH_OPEN_KEYS keys (default 100,000; the target is 1,000,000
// keys with 1 KiB values in under 10 s) with 1 KiB values.
func BenchmarkOpen(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("DYAD_BENCH_OPEN_KEYS")); err == nil && v > 0 {
		n = v
	}
	path := filepath.Join(b.TempDir(), "db")
	be, err := storage.Open(path, storage.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	s, err := Open(be, nil)
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fill(b, be, s, n, 1024)
	b.Logf("filled %d keys in %v", n, time.Since(start))
	be.Close()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		be, err := storage.Open(path, storage.Options{})
		if err != nil {
			b.Fatal(err)
		}
		s, err := Open(be, nil)
		if err != nil {
			b.Fatal(err)
		}
		if r, _, _ := s.Revs(); r != int64(n)+1 {
			b.Fatalf("reopened at revision %d, want %d", r, n+1)
		}
		be.Close()
	}
	b.ReportMetric(float64(n), "keys")
}

func BenchmarkRangeOneKey(b *testing.B) {
	be, s := openBench(b)
	fill(b, be, s, 10000, 256)
	key := []byte("/registry/pods/ns/00005000")
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if r, _, err := s.Range(key, nil, RangeOptions{}); err != nil || len(r.KVs) != 1 {
				b.Fatal(r, err)
			}
		}
	})
}

func BenchmarkRangePrefix500(b *testing.B) {
	be, s := openBench(b)
	fill(b, be, s, 10000, 256)
	key, end := []byte("/registry/pods/ns/00001"), []byte("/registry/pods/ns/000015")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if r, _, err := s.Range(key, end, RangeOptions{}); err != nil || len(r.KVs) != 500 {
			b.Fatal(len(r.KVs), err)
		}
	}
}

func openBench(b *testing.B) (*storage.Backend, *Store) {
	be, err := storage.Open(filepath.Join(b.TempDir(), "db"), storage.Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { be.Close() })
	s, err := Open(be, nil)
	if err != nil {
		b.Fatal(err)
	}
	return be, s
}

// BenchmarkWriterBesideListPages measures how long the writer waits for the
// index lock (MarkDurable takes it, as every applied batch does) while
// another goroutine reads the first 500-key page of a 100,000-key range over
// and over, as a LIST storm does: each page also counts the rest of the
// range. It reports the writer's p99 and longest wait.
func BenchmarkWriterBesideListPages(b *testing.B) {
	be, s := openBench(b)
	const n = 100000
	fill(b, be, s, n, 16)
	key, end := []byte("/registry/pods/"), []byte("/registry/pods0")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if r, _, err := s.Range(key, end, RangeOptions{Limit: 500}); err != nil || r.Count != n {
				b.Error(r.Count, err)
				return
			}
		}
	}()
	waits := make([]time.Duration, 0, b.N)
	_, cur, _ := s.Revs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s.MarkDurable(cur)
		waits = append(waits, time.Since(t0))
		time.Sleep(100 * time.Microsecond) // a writer's pace, not back to back
	}
	b.StopTimer()
	close(stop)
	<-done
	slices.Sort(waits)
	b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds()), "p99-wait-µs")
	b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max-wait-µs")
}

// BenchmarkPutExisting measures the write path's Put of a key that
// exists (the previous value is read for the event, the version and
// creation revision), in batches of 100 per storage transaction, in a
// small key space and in the 100,000 keys of the bench's put, where the
// index lookup leaves the CPU caches.
func BenchmarkPutExisting(b *testing.B) {
	for _, keys := range []int{1000, 100_000} {
		b.Run(fmt.Sprintf("keys=%d", keys), func(b *testing.B) { benchPutExisting(b, keys) })
	}
}

func benchPutExisting(b *testing.B, keys int) {
	be, s := openBench(b)
	fill(b, be, s, keys, 256)
	val := make([]byte, 256)
	names := make([][]byte, keys)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("/registry/pods/ns/%08d", i))
	}
	// A fixed random order: the bench's puts pick keys at random.
	order := rand.New(rand.NewPCG(1, 2)).Perm(keys)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		err := be.Apply(func(tx storage.WriteTx) error {
			for j := 0; j < 100 && i < b.N; j, i = j+1, i+1 {
				w := s.Write(tx)
				name := names[order[i%keys]]
				prev, err := w.Put(name, val, 0)
				if err != nil {
					return err
				}
				if prev == nil {
					b.Fatalf("%s: no previous value", name)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPutNew measures the write path's Put of a key the store does
// not hold yet, in batches of 100 per pending batch.
func BenchmarkPutNew(b *testing.B) {
	be, s := openBench(b)
	val := make([]byte, 256)
	names := make([][]byte, b.N)
	for i := range names {
		names[i] = []byte(fmt.Sprintf("/registry/pods/ns/%08d", i))
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; {
		err := be.Apply(func(tx storage.WriteTx) error {
			for j := 0; j < 100 && i < b.N; j, i = j+1, i+1 {
				if _, err := s.Write(tx).Put(names[i], val, 0); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
