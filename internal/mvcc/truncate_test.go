package mvcc

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/internal/storage"
)

// DropAbove takes a store back to an earlier revision: what it then holds
// and hashes is what a store that never applied the newer changes holds,
// new writes continue from that revision, and a restart finds the same.
func TestDropAbove(t *testing.T) {
	common := []op{{"a=1"}, {"b=1", "c=1"}, {"a=2"}} // revs 2, 3, 4
	suffix := []op{{"-a..c"}, {"b=2", "d=1"}, {"-zzz"}, {"a=3"}}

	_, want := openTest(t)
	wantBe := want.be
	apply(t, wantBe, want, common...)
	apply(t, wantBe, want, op{"e=1"}) // rev 5, after the drop

	dir := t.TempDir()
	be, err := storage.Open(filepath.Join(dir, "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, be, s, common...)
	apply(t, be, s, suffix...)
	if _, cur, _ := s.Revs(); cur != 7 {
		t.Fatalf("before the drop: revision %d, want 7", cur)
	}
	also := false
	if err := s.DropAbove(4, func(storage.WriteTx) error { also = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !also {
		t.Error("the caller's changes were not made in the drop's transaction")
	}
	if readable, cur, _ := s.Revs(); readable != 4 || cur != 4 {
		t.Fatalf("after the drop: readable %d, current %d, want 4 and 4", readable, cur)
	}
	apply(t, be, s, op{"e=1"})

	check := func(s *Store) {
		t.Helper()
		for _, at := range []int64{0, 3, 4} {
			got, _, err := s.Range([]byte("\x00"), []byte("\x00"), RangeOptions{Rev: at})
			if err != nil {
				t.Fatal(err)
			}
			exp, _, _ := want.Range([]byte("\x00"), []byte("\x00"), RangeOptions{Rev: at})
			if kvString(got.KVs) != kvString(exp.KVs) {
				t.Errorf("at revision %d: %q, want %q", at, kvString(got.KVs), kvString(exp.KVs))
			}
		}
		got, err := s.HashKV(0)
		if err != nil {
			t.Fatal(err)
		}
		exp, _ := want.HashKV(0)
		if got != exp {
			t.Errorf("HashKV %+v, want %+v", got, exp)
		}
	}
	check(s)
	be.Close()
	be, err = storage.Open(filepath.Join(dir, "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s2, err := Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	check(s2)
}

// DropAbove refuses, changing nothing, a revision the store cannot be
// taken back to: one it never reached, or one compacted past.
func TestDropAboveRefuses(t *testing.T) {
	be, s := openTest(t)
	apply(t, be, s, op{"a=1"}, op{"a=2"}, op{"a=3"}, op{"b=1"}) // revs 2-5
	if err := s.DropAbove(9, func(storage.WriteTx) error { return nil }); !errors.Is(err, ErrCannotDrop) {
		t.Errorf("drop above a future revision: err = %v, want ErrCannotDrop", err)
	}
	var c *Compaction
	err := be.Update(func(tx storage.WriteTx) error {
		var err error
		c, err = s.Compact(tx, 4)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PhysicalCompact(c); err != nil {
		t.Fatal(err)
	}
	if err := s.DropAbove(3, func(storage.WriteTx) error { return nil }); !errors.Is(err, ErrCannotDrop) {
		t.Errorf("drop below the compaction point: err = %v, want ErrCannotDrop", err)
	}
	if _, cur, _ := s.Revs(); cur != 5 {
		t.Errorf("after refusals: revision %d, want 5", cur)
	}
	res, _, err := s.Range([]byte("b"), nil, RangeOptions{})
	if err != nil || len(res.KVs) != 1 {
		t.Errorf("after refusals: b = %v (%v), want it kept", res.KVs, err)
	}
}
