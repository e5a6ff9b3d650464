package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

func openBatch(t *testing.T, opts Options) *Backend {
	t.Helper()
	b, err := Open(filepath.Join(t.TempDir(), "db"), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// openCopy writes raw (a data file's bytes) to a file of its own and opens
// it read-only, as a start after a crash would find it.
func openCopy(t *testing.T, raw []byte) *bolt.DB {
	t.Helper()
	cp := filepath.Join(t.TempDir(), "copy")
	if err := os.WriteFile(cp, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := bolt.Open(cp, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// onDisk reads key from a copy of the data file as it is on disk now,
// that is, as a crash would leave it.
func onDisk(t *testing.T, b *Backend, bucket, key []byte) []byte {
	t.Helper()
	raw, err := os.ReadFile(b.Path())
	if err != nil {
		t.Fatal(err)
	}
	db := openCopy(t, raw)
	defer db.Close()
	var v []byte
	db.View(func(tx *bolt.Tx) error {
		v = bytes.Clone(tx.Bucket(bucket).Get(key))
		return nil
	})
	return v
}

func get(t *testing.T, b *Backend, bucket, key []byte) []byte {
	t.Helper()
	var v []byte
	if err := b.View(func(tx ReadTx) error { v = bytes.Clone(tx.Get(bucket, key)); return nil }); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestApplyIsVisibleAtOnceAndDurableAtCommit(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1})
	k := []byte("k")
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, k, []byte("v1")) }); err != nil {
		t.Fatal(err)
	}
	if got := get(t, b, BucketKey, k); string(got) != "v1" {
		t.Fatalf("a reader after Apply reads %q, want v1", got)
	}
	if got := onDisk(t, b, BucketKey, k); got != nil {
		t.Fatalf("the file holds %q before any commit", got)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if got := onDisk(t, b, BucketKey, k); string(got) != "v1" {
		t.Fatalf("the file holds %q after Commit, want v1", got)
	}
	if got := get(t, b, BucketKey, k); string(got) != "v1" {
		t.Fatalf("a reader after Commit reads %q, want v1", got)
	}
	// A delete pending over a committed value hides it.
	if err := b.Apply(func(tx WriteTx) error { return tx.Delete(BucketKey, k) }); err != nil {
		t.Fatal(err)
	}
	if got := get(t, b, BucketKey, k); got != nil {
		t.Fatalf("a pending delete reads as %q", got)
	}
	if got := onDisk(t, b, BucketKey, k); string(got) != "v1" {
		t.Fatalf("the file lost the value before the delete was committed: %q", got)
	}
}

func TestUpdateCommitsPendingAndKeepsItWhenItsOwnCallbackFails(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1})
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("a"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := b.Update(func(tx WriteTx) error {
		if err := tx.Put(BucketKey, []byte("b"), []byte("2")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Update returned %v, want its callback's error", err)
	}
	if got := onDisk(t, b, BucketKey, []byte("a")); string(got) != "1" {
		t.Fatalf("the pending write is %q on disk after Update, want 1", got)
	}
	if got := get(t, b, BucketKey, []byte("b")); got != nil {
		t.Fatalf("the failed Update's write reads as %q", got)
	}
	// The backend still takes writes.
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("c"), []byte("3")) }); err != nil {
		t.Fatal(err)
	}
}

// TestApplyFailureKeepsEarlierBatchesAndTheBackend: a failed callback's
// writes were only in its own layer, so dropping them loses nothing of
// the batches before it, and the backend goes on taking writes (it used to
// break, when a failed callback took the whole pending bbolt transaction
// with it).
func TestApplyFailureKeepsEarlierBatchesAndTheBackend(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1})
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("a"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := b.Apply(func(tx WriteTx) error {
		if err := tx.Put(BucketKey, []byte("b"), []byte("2")); err != nil {
			return err
		}
		if err := tx.Delete(BucketKey, []byte("a")); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Apply returned %v, want its callback's error", err)
	}
	if got := get(t, b, BucketKey, []byte("a")); string(got) != "1" {
		t.Fatalf("the earlier batch reads %q after the failure, want 1", got)
	}
	if got := get(t, b, BucketKey, []byte("b")); got != nil {
		t.Fatalf("the failed callback's write reads as %q", got)
	}
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("c"), []byte("3")) }); err != nil {
		t.Fatalf("Apply after a failed callback: %v", err)
	}
	if err := b.Commit(); err != nil {
		t.Fatalf("Commit after a failed callback: %v", err)
	}
	for k, want := range map[string]string{"a": "1", "b": "", "c": "3"} {
		if got := onDisk(t, b, BucketKey, []byte(k)); string(got) != want {
			t.Errorf("after Commit the file holds %s=%q, want %q", k, got, want)
		}
	}
	if err := b.Update(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("d"), []byte("4")) }); err != nil {
		t.Fatalf("Update after a failed callback: %v", err)
	}
}

// TestFailedCommitBreaksTheBackend: when bbolt's commit of what Apply
// wrote fails, every later write fails with the cause, while readers go
// on seeing every batch applied.
func TestFailedCommitBreaksTheBackend(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1})
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("a"), []byte("1")) }); err != nil {
		t.Fatal(err)
	}
	full := errors.New("no space left on device")
	b.InjectFault(func() error { return full })
	if err := b.Commit(); !errors.Is(err, full) {
		t.Fatalf("Commit under a fault: %v, want the fault", err)
	}
	b.InjectFault(nil)
	if got := get(t, b, BucketKey, []byte("a")); string(got) != "1" {
		t.Fatalf("after the failed commit a reader reads %q, want 1", got)
	}
	for name, write := range map[string]func() error{
		"Apply":  func() error { return b.Apply(func(WriteTx) error { return nil }) },
		"Update": func() error { return b.Update(func(WriteTx) error { return nil }) },
		"Commit": b.Commit,
	} {
		if err := write(); !errors.Is(err, full) {
			t.Errorf("%s after a failed commit: %v, want an error wrapping the cause", name, err)
		}
	}
	if got := onDisk(t, b, BucketKey, []byte("a")); got != nil {
		t.Fatalf("the failed commit reached the file: %q", got)
	}
}

func TestInjectedFaultFailsApply(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1})
	full := errors.New("no space left on device")
	b.InjectFault(func() error { return full })
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("a"), []byte("1")) }); !errors.Is(err, full) {
		t.Fatalf("Apply under a fault: %v, want the fault", err)
	}
	if got := get(t, b, BucketKey, []byte("a")); got != nil {
		t.Fatalf("a write refused by the fault reads as %q", got)
	}
}

func TestBatchLimitAndIntervalCommit(t *testing.T) {
	var commits atomic.Int64
	b := openBatch(t, Options{BatchInterval: -1, BatchLimit: 3, OnCommit: func(time.Duration) { commits.Add(1) }})
	base := commits.Load()
	for i := range 2 {
		if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte{byte(i)}, []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	if n := commits.Load() - base; n != 0 {
		t.Fatalf("%d commits below the limit", n)
	}
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte{2}, []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	// The limit starts a commit in the background (the timer is off).
	deadline := time.Now().Add(20 * time.Second)
	for commits.Load()-base == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no commit after the Apply that reached the limit")
		}
		time.Sleep(time.Millisecond)
	}
	if n := commits.Load() - base; n != 1 {
		t.Fatalf("%d commits at the limit, want 1", n)
	}
	if got := onDisk(t, b, BucketKey, []byte{0}); got == nil {
		t.Fatal("the batch that reached the limit is not on disk")
	}

	// The background committer: a pending write reaches the file with no
	// call at all.
	c := openBatch(t, Options{BatchInterval: 10 * time.Millisecond})
	if err := c.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("bg"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(20 * time.Second)
	for onDisk(t, c, BucketKey, []byte("bg")) == nil {
		if time.Now().After(deadline) {
			t.Fatal("the background committer never committed the pending write")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestOverlayScansMatchAModel writes random puts and deletes, some
// committed and some pending, and checks every Get, Scan and ScanReverse
// against a plain map of what was written.
func TestOverlayScansMatchAModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			b := openBatch(t, Options{BatchInterval: -1})
			model := map[string]string{}
			key := func() []byte { return []byte{byte('a' + rng.IntN(12))} }
			for round := range 4 {
				err := b.Apply(func(tx WriteTx) error {
					for range 1 + rng.IntN(8) {
						k := key()
						if rng.IntN(3) == 0 {
							delete(model, string(k))
							if err := tx.Delete(BucketKey, k); err != nil {
								return err
							}
							continue
						}
						v := fmt.Sprintf("%d-%d", round, rng.IntN(100))
						model[string(k)] = v
						if err := tx.Put(BucketKey, k, []byte(v)); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if round%2 == 1 && round != 3 { // the last rounds stay pending
					if err := b.Commit(); err != nil {
						t.Fatal(err)
					}
				}
			}
			keys := make([]string, 0, len(model))
			for k := range model {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			bound := func() []byte {
				if rng.IntN(4) == 0 {
					return nil
				}
				return key()
			}
			for range 30 {
				from, to := bound(), bound()
				limit := 1 + rng.IntN(6)
				var want []string
				for _, k := range keys {
					if inRange([]byte(k), from, to) {
						want = append(want, k+"="+model[k])
					}
				}
				wantRev := slices.Clone(want)
				slices.Reverse(wantRev)
				if len(want) > limit {
					want, wantRev = want[:limit], wantRev[:limit]
				}
				var got, gotRev []string
				err := b.View(func(tx ReadTx) error {
					for _, k := range keys {
						if v := tx.Get(BucketKey, []byte(k)); string(v) != model[k] {
							return fmt.Errorf("Get(%s) = %q, want %q", k, v, model[k])
						}
					}
					collect := func(out *[]string) func(k, v []byte) (bool, error) {
						return func(k, v []byte) (bool, error) {
							*out = append(*out, string(k)+"="+string(v))
							return len(*out) < limit, nil
						}
					}
					if err := tx.Scan(BucketKey, from, to, collect(&got)); err != nil {
						return err
					}
					return tx.ScanReverse(BucketKey, from, to, collect(&gotRev))
				})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("Scan [%q, %q) limit %d = %v, want %v", from, to, limit, got, want)
				}
				if !slices.Equal(gotRev, wantRev) {
					t.Fatalf("ScanReverse [%q, %q) limit %d = %v, want %v", from, to, limit, gotRev, wantRev)
				}
			}
		})
	}
}

// TestReadersSeeWholeBatchesAcrossCommits runs a writer that applies one
// key and a counter per batch, commits every few batches and in the
// background, while readers check that the counter never runs ahead of
// the keys it counts and never goes back.
func TestReadersSeeWholeBatchesAcrossCommits(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: time.Millisecond})
	counter := []byte("n")
	const n = 400
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errc := make(chan error, 4)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := uint64(0)
			for {
				select {
				case <-stop:
					return
				default:
				}
				err := b.View(func(tx ReadTx) error {
					c := Uint64(tx.Get(BucketMeta, counter))
					if c < last {
						return fmt.Errorf("the counter went back from %d to %d", last, c)
					}
					last = c
					seen := uint64(0)
					err := tx.Scan(BucketKey, nil, nil, func(k, v []byte) (bool, error) {
						seen++
						return true, nil
					})
					if err != nil {
						return err
					}
					if seen < c {
						return fmt.Errorf("the counter says %d, a scan finds %d keys", c, seen)
					}
					return nil
				})
				if err != nil {
					errc <- err
					return
				}
			}
		}()
	}
	for i := uint64(1); i <= n; i++ {
		err := b.Apply(func(tx WriteTx) error {
			if err := tx.Put(BucketKey, PutUint64(i), []byte("v")); err != nil {
				return err
			}
			return tx.Put(BucketMeta, counter, PutUint64(i))
		})
		if err != nil {
			t.Fatal(err)
		}
		if i%17 == 0 {
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	if got := Uint64(get(t, b, BucketMeta, counter)); got != n {
		t.Fatalf("counter %d at the end, want %d", got, n)
	}
}

func TestCloseCommitsPending(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	b, err := Open(path, Options{BatchInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte("k"), []byte("v")) }); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	b, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := get(t, b, BucketKey, []byte("k")); string(got) != "v" {
		t.Fatalf("after Close and reopen the key reads %q, want v", got)
	}
}

// TestLayeredScansMatchAModel lays three random layers of puts and
// deletes over a random committed bucket and checks Get, Scan and
// ScanReverse, over random ranges and limits, against a map built by
// applying bbolt's keys and then the layers from the bottom up. Keys are
// drawn from a space larger than a cursor's chunk so that the layers'
// cursors resume across chunks.
func TestLayeredScansMatchAModel(t *testing.T) {
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			b := openBatch(t, Options{BatchInterval: -1})
			space := 64 + rng.IntN(300)
			key := func() []byte { return []byte(fmt.Sprintf("k%03d", rng.IntN(space))) }
			model := map[string]string{}
			err := b.Update(func(tx WriteTx) error {
				for range rng.IntN(space) {
					k, v := key(), fmt.Sprintf("base-%d", rng.IntN(100))
					model[string(k)] = v
					if err := tx.Put(BucketKey, k, []byte(v)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var layers [maxLayers]*overlay // top first
			for i := maxLayers - 1; i >= 0; i-- {
				o := newOverlay()
				for range rng.IntN(space) {
					k := key()
					if rng.IntN(3) == 0 {
						o.del(BucketKey, k)
						delete(model, string(k))
						continue
					}
					v := fmt.Sprintf("layer%d-%d", i, rng.IntN(100))
					o.put(BucketKey, k, []byte(v))
					model[string(k)] = v
				}
				layers[i] = o
			}
			keys := make([]string, 0, len(model))
			for k := range model {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			tx, err := b.db.Begin(false)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			lt := &layeredTx{base: boltTx{tx}}
			for _, o := range layers {
				lt.push(o)
			}
			for i := range space {
				k := fmt.Sprintf("k%03d", i)
				if v := lt.Get(BucketKey, []byte(k)); string(v) != model[k] {
					t.Fatalf("Get(%s) = %q, want %q", k, v, model[k])
				}
			}
			bound := func() []byte {
				if rng.IntN(4) == 0 {
					return nil
				}
				return key()
			}
			for range 40 {
				from, to := bound(), bound()
				limit := 1 + rng.IntN(2*space)
				var want []string
				for _, k := range keys {
					if inRange([]byte(k), from, to) {
						want = append(want, k+"="+model[k])
					}
				}
				wantRev := slices.Clone(want)
				slices.Reverse(wantRev)
				if len(want) > limit {
					want, wantRev = want[:limit], wantRev[:limit]
				}
				collect := func(out *[]string) func(k, v []byte) (bool, error) {
					return func(k, v []byte) (bool, error) {
						*out = append(*out, string(k)+"="+string(v))
						return len(*out) < limit, nil
					}
				}
				var got, gotRev []string
				if err := lt.Scan(BucketKey, from, to, collect(&got)); err != nil {
					t.Fatal(err)
				}
				if err := lt.ScanReverse(BucketKey, from, to, collect(&gotRev)); err != nil {
					t.Fatal(err)
				}
				if !slices.Equal(got, want) {
					t.Fatalf("Scan [%q, %q) limit %d = %v, want %v", from, to, limit, got, want)
				}
				if !slices.Equal(gotRev, wantRev) {
					t.Fatalf("ScanReverse [%q, %q) limit %d = %v, want %v", from, to, limit, gotRev, wantRev)
				}
			}
		})
	}
}

// TestPutOwnedKeepsTheCallersBuffer: in an Apply batch, PutOwned keeps
// the value it is handed (a reader sees that very buffer until the
// commit), where Put keeps a copy; in Update, which writes bbolt
// directly, PutOwned copies as Put does. Either way the value reads
// back, before and after the commit.
func TestPutOwnedKeepsTheCallersBuffer(t *testing.T) {
	for _, c := range []struct {
		name   string
		update bool // Update instead of Apply
		owned  bool // PutOwned instead of Put
		shared bool // a reader gets the caller's buffer
	}{
		{"apply-put", false, false, false},
		{"apply-owned", false, true, true},
		{"update-owned", true, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := openBatch(t, Options{BatchInterval: -1})
			k, v := []byte("k"), []byte("value")
			put := func(tx WriteTx) error {
				if c.owned {
					return PutOwned(tx, BucketKey, bytes.Clone(k), v)
				}
				return tx.Put(BucketKey, k, v)
			}
			var err error
			if c.update {
				err = b.Update(put)
			} else {
				err = b.Apply(put)
			}
			if err != nil {
				t.Fatal(err)
			}
			var shared bool
			var got []byte
			if err := b.View(func(tx ReadTx) error {
				r := tx.Get(BucketKey, k)
				shared = len(r) > 0 && &r[0] == &v[0]
				got = bytes.Clone(r)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if string(got) != "value" || shared != c.shared {
				t.Fatalf("a reader got %q, the caller's own buffer: %v; want %q, %v", got, shared, "value", c.shared)
			}
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
			if got := onDisk(t, b, BucketKey, k); string(got) != "value" {
				t.Fatalf("the file holds %q after Commit, want value", got)
			}
		})
	}
}
