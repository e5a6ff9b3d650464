package mvcc

import (
	"fmt"
	"testing"

	"github.com/dyad-db/dyad/internal/storage"
)

// fillKeys puts n keys k/00000000.. in one revision per key.
func fillKeys(t *testing.T, be *storage.Backend, s *Store, n int) {
	t.Helper()
	ops := make([]op, n)
	for i := range ops {
		ops[i] = op{fmt.Sprintf("k/%08d=v", i)}
	}
	apply(t, be, s, ops...)
}

// TestRangeCountLetsWritersIn checks that counting a long range does not
// hold the index lock across the whole range: between chunks a writer gets
// in (the hook below takes the write lock, which would deadlock if the read
// lock were still held), and the count stays the one at the revision the
// range started at although keys were added and deleted meanwhile.
func TestRangeCountLetsWritersIn(t *testing.T) {
	be, s := openTest(t)
	n := 3*rangeChunk + 7
	fillKeys(t, be, s, n)
	_, before, _ := s.Revs()
	yields := 0
	s.rangeYield = func() {
		yields++
		if yields == 1 {
			// Add one key in the range and delete another: neither may
			// change a count taken at the range's revision.
			apply(t, be, s, op{"k/zzzz=new"}, op{"-k/00000001"})
		}
	}
	res, rev, err := s.Range([]byte("k/"), []byte("k0"), RangeOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if yields == 0 {
		t.Fatal("the range was counted without ever releasing the index lock")
	}
	if rev != before || res.Count != n || len(res.KVs) != 2 {
		t.Fatalf("range = rev %d, count %d, %d kvs; want rev %d, count %d, 2 kvs", rev, res.Count, len(res.KVs), before, n)
	}
	// A count-only range behaves the same way.
	s.rangeYield = nil
	res, _, err = s.Range([]byte("k/"), []byte("k0"), RangeOptions{Count: true, Rev: before})
	if err != nil || res.Count != n {
		t.Fatalf("count at %d = %d, %v; want %d", before, res.Count, err, n)
	}
}

// TestRangeCountCompactedMidway checks that a compaction past the range's
// revision between two chunks does not yield a count mixing two revisions:
// a read of the newest revision starts again at the new one, a read at a
// fixed revision fails as compacted.
func TestRangeCountCompactedMidway(t *testing.T) {
	be, s := openTest(t)
	n := 2*rangeChunk + 3
	fillKeys(t, be, s, n)
	_, before, _ := s.Revs()
	compactAfterWrite := func() {
		apply(t, be, s, op{"k/zzzz=new"})
		_, cur, _ := s.Revs()
		err := be.Update(func(tx storage.WriteTx) error {
			_, err := s.Compact(tx, cur)
			return err
		})
		if err != nil {
			t.Error(err)
		}
	}
	yields := 0
	s.rangeYield = func() {
		if yields++; yields == 1 {
			compactAfterWrite()
		}
	}
	res, rev, err := s.Range([]byte("k/"), []byte("k0"), RangeOptions{Count: true})
	if err != nil {
		t.Fatal(err)
	}
	if yields == 0 {
		t.Fatal("the range was counted without ever releasing the index lock")
	}
	if rev != before+1 || res.Count != n+1 {
		t.Fatalf("count = %d at rev %d; want %d at %d (read again after the compaction)", res.Count, rev, n+1, before+1)
	}

	yields = 0
	s.rangeYield = func() {
		if yields++; yields == 1 {
			compactAfterWrite()
		}
	}
	_, cur, _ := s.Revs()
	if _, _, err := s.Range([]byte("k/"), []byte("k0"), RangeOptions{Count: true, Rev: cur}); err != ErrCompacted {
		t.Fatalf("count at a revision compacted midway: err = %v, want ErrCompacted", err)
	}
}
