package storage

import (
	"fmt"
	"testing"
)

// activeLayer returns the active layer a View's transaction reads (nil:
// none, the read went to bbolt alone).
func activeLayer(tx ReadTx) *overlay {
	if lt, ok := tx.(*layeredTx); ok && lt.n > 0 {
		return lt.ovs[0]
	}
	return nil
}

// Readers share one clone of the active layer until a batch changes it:
// two Views with no Apply between them read the same clone, a View after
// an Apply reads a new one holding the batch (and the earlier reader's
// clone does not), and after a commit a View reads bbolt alone.
func TestViewsShareOneCloneOfTheActiveLayer(t *testing.T) {
	b := openBatch(t, Options{BatchInterval: -1, NoSync: true})
	put := func(k string) {
		t.Helper()
		if err := b.Apply(func(tx WriteTx) error { return tx.Put(BucketKey, []byte(k), []byte("v")) }); err != nil {
			t.Fatal(err)
		}
	}
	view := func() (layer *overlay, seen map[string]bool) {
		t.Helper()
		seen = map[string]bool{}
		err := b.View(func(tx ReadTx) error {
			layer = activeLayer(tx)
			for _, k := range []string{"a", "b"} {
				seen[k] = tx.Get(BucketKey, []byte(k)) != nil
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return layer, seen
	}
	put("a")
	first, seen1 := view()
	second, seen2 := view()
	if first == nil || first != second {
		t.Fatalf("two Views with nothing applied between them read layers %p and %p, want one shared clone", first, second)
	}
	if !seen1["a"] || !seen2["a"] {
		t.Fatalf("the Views missed the applied key: %v, %v", seen1, seen2)
	}
	put("b")
	third, seen3 := view()
	if third == first || !seen3["a"] || !seen3["b"] {
		t.Fatalf("a View after another Apply read the old clone (%v) or missed a key: %v", third == first, seen3)
	}
	if _, ok := first.get(BucketKey, []byte("b")); ok {
		t.Fatal("the clone an earlier reader holds changed under it: it holds the later batch")
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	last, seen4 := view()
	if last != nil || !seen4["a"] || !seen4["b"] {
		t.Fatalf("after the commit a View read a layer (%v) or missed a key: %v", last != nil, seen4)
	}
}

// A View over an unchanged active layer allocates no clone of it: its
// allocations do not grow with the number of buckets the layer touches
// (a clone allocates a tree per bucket).
func TestViewAllocatesNoCloneOfAnUnchangedLayer(t *testing.T) {
	allocs := func(buckets int) float64 {
		b := openBatch(t, Options{BatchInterval: -1, NoSync: true})
		err := b.Apply(func(tx WriteTx) error {
			for i, bk := range allBuckets[:buckets] {
				if err := tx.Put(bk, []byte(fmt.Sprint("k", i)), []byte("v")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		key := []byte("k0")
		return testing.AllocsPerRun(100, func() {
			b.View(func(tx ReadTx) error {
				if tx.Get(allBuckets[0], key) == nil {
					t.Error("the applied key is missing")
				}
				return nil
			})
		})
	}
	one, many := allocs(1), allocs(len(allBuckets))
	t.Logf("allocations per View: %v over a layer of 1 bucket, %v over %d", one, many, len(allBuckets))
	if many != one {
		t.Fatalf("a View over a layer of %d buckets allocates %v times, over one bucket %v: the layer is cloned per read", len(allBuckets), many, one)
	}
}
