package mvcc

import (
	"fmt"
	"path/filepath"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dyad-db/dyad/internal/storage"
)

func openTest(t *testing.T) (*storage.Backend, *Store) {
	t.Helper()
	be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	s, err := Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	return be, s
}

// op is one etcd transaction of puts ("k=v") and deletes ("-k" or "-a..b").
type op []string

func apply(t *testing.T, be *storage.Backend, s *Store, ops ...op) {
	t.Helper()
	for _, o := range ops {
		var rev int64
		err := be.Update(func(tx storage.WriteTx) error {
			w := s.Write(tx)
			for _, c := range o {
				if c[0] == '-' {
					key, end := c[1:], ""
					for i := 0; i+1 < len(key); i++ {
						if key[i] == '.' && key[i+1] == '.' {
							key, end = key[:i], key[i+2:]
							break
						}
					}
					var e []byte
					if end != "" {
						e = []byte(end)
					}
					if _, err := w.DeleteRange([]byte(key), e); err != nil {
						return err
					}
					continue
				}
				for i := range c {
					if c[i] == '=' {
						if _, err := w.Put([]byte(c[:i]), []byte(c[i+1:]), 0); err != nil {
							return err
						}
						break
					}
				}
			}
			rev = w.Rev()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		s.MarkDurable(rev)
	}
}

func kvString(kvs []mvccpb.KeyValue) string {
	out := ""
	for _, kv := range kvs {
		out += fmt.Sprintf("%s=%s@c%d,m%d,v%d ", kv.Key, kv.Value, kv.CreateRevision, kv.ModRevision, kv.Version)
	}
	return out
}

func TestRangeAtRevisions(t *testing.T) {
	be, s := openTest(t)
	apply(t, be, s,
		op{"a=1"},          // rev 2
		op{"b=1", "c=1"},   // rev 3
		op{"a=2"},          // rev 4
		op{"-b"},           // rev 5
		op{"b=2"},          // rev 6
		op{"-zzz"},         // no change: no revision
		op{"-a..c", "d=1"}, // rev 7: deletes a and b, puts d
	)
	tests := []struct {
		name     string
		key, end string
		rev      int64
		limit    int64
		want     string
		count    int
	}{
		{"one key now", "c", "", 0, 0, "c=1@c3,m3,v1 ", 1},
		{"all now", "a", "\x00", 0, 0, "c=1@c3,m3,v1 d=1@c7,m7,v1 ", 2},
		{"all at 4", "\x00", "\x00", 4, 0, "a=2@c2,m4,v2 b=1@c3,m3,v1 c=1@c3,m3,v1 ", 3},
		{"b deleted at 5", "b", "", 5, 0, "", 0},
		{"b reborn at 6", "b", "", 6, 0, "b=2@c6,m6,v1 ", 1},
		{"limit counts all", "a", "z", 6, 2, "a=2@c2,m4,v2 b=2@c6,m6,v1 ", 3},
		{"range end excl", "a", "c", 3, 0, "a=1@c2,m2,v1 b=1@c3,m3,v1 ", 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var end []byte
			if tc.end != "" {
				end = []byte(tc.end)
			}
			res, rev, err := s.Range([]byte(tc.key), end, RangeOptions{Rev: tc.rev, Limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			if got := kvString(res.KVs); got != tc.want {
				t.Errorf("kvs = %q, want %q", got, tc.want)
			}
			if res.Count != tc.count {
				t.Errorf("count = %d, want %d", res.Count, tc.count)
			}
			if rev != 7 {
				t.Errorf("store rev = %d, want 7", rev)
			}
		})
	}
	if _, _, err := s.Range([]byte("a"), nil, RangeOptions{Rev: 8}); err != ErrFutureRev {
		t.Errorf("future rev: err = %v", err)
	}
}

// TestRestartRebuildsIndex checks that reopening yields the same answers,
// including versions and create revisions across deletions.
func TestRestartRebuildsIndex(t *testing.T) {
	dir := t.TempDir()
	be, err := storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, be, s, op{"a=1"}, op{"a=2"}, op{"-a"}, op{"a=3"}, op{"b=1"})
	before, _, _ := s.Range([]byte("\x00"), []byte("\x00"), RangeOptions{})
	old, _, _ := s.Range([]byte("a"), nil, RangeOptions{Rev: 3})
	be.Close()
	be, err = storage.Open(filepath.Join(dir, "db"), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	s2, err := Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	after, rev, _ := s2.Range([]byte("\x00"), []byte("\x00"), RangeOptions{})
	old2, _, _ := s2.Range([]byte("a"), nil, RangeOptions{Rev: 3})
	if kvString(before.KVs) != kvString(after.KVs) || kvString(old.KVs) != kvString(old2.KVs) {
		t.Fatalf("after restart %q / %q, before %q / %q", kvString(after.KVs), kvString(old2.KVs), kvString(before.KVs), kvString(old.KVs))
	}
	if rev != 6 {
		t.Fatalf("rev after restart = %d, want 6", rev)
	}
}

func TestCompaction(t *testing.T) {
	be, s := openTest(t)
	apply(t, be, s, op{"a=1"}, op{"a=2"}, op{"b=1"}, op{"-b"}, op{"a=3"}) // revs 2..6
	var c *Compaction
	err := be.Update(func(tx storage.WriteTx) error {
		var err error
		c, err = s.Compact(tx, 5)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PhysicalCompact(c); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Range([]byte("a"), nil, RangeOptions{Rev: 4}); err != ErrCompacted {
		t.Fatalf("read below compaction: err = %v", err)
	}
	res, _, err := s.Range([]byte("a"), nil, RangeOptions{Rev: 5})
	if err != nil || kvString(res.KVs) != "a=2@c2,m3,v2 " {
		t.Fatalf("read at compaction: %q, %v", kvString(res.KVs), err)
	}
	// On disk a@3 (kept), b's tombstone at the compaction revision (kept,
	// as etcd since 3.5.16 keeps it) and a@6 remain; b@4 is gone.
	n := 0
	be.View(func(tx storage.ReadTx) error {
		return tx.Scan(storage.BucketKey, nil, nil, func(k, v []byte) (bool, error) { n++; return true, nil })
	})
	if n != 3 {
		t.Fatalf("revisions on disk after compaction = %d, want 3", n)
	}
	if _, _, err := s.History(4, 6, 0); err != ErrCompacted {
		t.Fatalf("history from compacted rev: %v", err)
	}
	evs, last, err := s.History(6, 6, 0)
	if err != nil || len(evs) != 1 || last != 6 || string(evs[0].Kv.Value) != "3" {
		t.Fatalf("history(6): %v %d %v", evs, last, err)
	}
	// Compacting again at or below is refused; above the head too.
	be.Update(func(tx storage.WriteTx) error {
		if _, err := s.Compact(tx, 5); err != ErrCompacted {
			t.Errorf("recompact: %v", err)
		}
		if _, err := s.Compact(tx, 99); err != ErrFutureRev {
			t.Errorf("future compact: %v", err)
		}
		return nil
	})
}

// TestCompactAtZero checks etcd's edge: its compaction point starts at -1,
// so the first compaction at revision 0 succeeds, a second one (also after
// a restart) is refused, and negative revisions are always refused.
func TestCompactAtZero(t *testing.T) {
	be, s := openTest(t)
	apply(t, be, s, op{"a=1"})
	compact := func(st *Store, rev int64) error {
		var c *Compaction
		err := be.Update(func(tx storage.WriteTx) error {
			var err error
			c, err = st.Compact(tx, rev)
			return err
		})
		if err != nil {
			return err
		}
		return st.PhysicalCompact(c)
	}
	steps := []struct {
		rev     int64
		restart bool
		want    error
	}{
		{-1, false, ErrCompacted},
		{0, false, nil},
		{0, false, ErrCompacted},
		{0, true, ErrCompacted},
		{-5, false, ErrCompacted},
		{1, false, nil},
		{2, true, nil},
	}
	for i, st := range steps {
		if st.restart {
			var err error
			if s, err = Open(be, nil); err != nil {
				t.Fatal(err)
			}
		}
		if err := compact(s, st.rev); err != st.want {
			t.Fatalf("step %d: compact(%d) = %v, want %v", i, st.rev, err, st.want)
		}
	}
	res, _, err := s.Range([]byte("a"), nil, RangeOptions{})
	if err != nil || kvString(res.KVs) != "a=1@c2,m2,v1 " {
		t.Fatalf("after compactions: %q, %v", kvString(res.KVs), err)
	}
}

// TestHashKVNegativeRevision checks etcd's reading of a negative revision:
// only 0 means "current"; a negative one covers no revision at all.
func TestHashKVNegativeRevision(t *testing.T) {
	be, s := openTest(t)
	empty, err := s.HashKV(-1)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, be, s, op{"a=1"}, op{"b=2"})
	cur, err := s.HashKV(0)
	if err != nil {
		t.Fatal(err)
	}
	for _, rev := range []int64{-1, -7} {
		h, err := s.HashKV(rev)
		if err != nil || h.Hash != empty.Hash || h.Hash == cur.Hash {
			t.Fatalf("HashKV(%d) = %d, %v; want the empty hash %d (current is %d)", rev, h.Hash, err, empty.Hash, cur.Hash)
		}
	}
}

func TestHistoryEventsAndHashStable(t *testing.T) {
	be, s := openTest(t)
	apply(t, be, s, op{"a=1", "b=1"}, op{"-a"}, op{"c=1"})
	evs, _, err := s.History(2, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range evs {
		got = append(got, fmt.Sprintf("%s %s@%d", e.Type, e.Kv.Key, e.Kv.ModRevision))
	}
	want := []string{"PUT a@2", "PUT b@2", "DELETE a@3", "PUT c@4"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("history = %v, want %v", got, want)
	}
	evs, last, _ := s.History(2, 4, 1)
	if len(evs) != 2 || last != 2 {
		t.Fatalf("limited history kept %d events up to %d; a revision must not be split", len(evs), last)
	}
	h1, _ := s.HashKV(0)
	h2, _ := s.HashKV(4)
	h3, _ := s.HashKV(3)
	if h1.Hash != h2.Hash || h1.Rev != 4 || h2.Rev != 4 || h1.Hash == h3.Hash || h1.CompactRev != -1 {
		t.Fatalf("hashes: now %+v, at4 %+v, at3 %+v", h1, h2, h3)
	}
}

// A jump (the merge after a split brain) moves the revision forward with
// no change; compacted at the new revision, it survives a restart, both
// with the compaction finished and with it only scheduled.
func TestJumpSurvivesRestart(t *testing.T) {
	for _, finish := range []bool{true, false} {
		dir := t.TempDir()
		be, err := storage.Open(filepath.Join(dir, "db"), storage.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		s, err := Open(be, nil)
		if err != nil {
			t.Fatal(err)
		}
		apply(t, be, s, op{"a=1"}, op{"a=2"}) // revs 2, 3
		if err := s.Jump(2); err == nil {
			t.Fatal("jump backwards accepted")
		}
		var c *Compaction
		err = be.Update(func(tx storage.WriteTx) error {
			if err := s.Jump(100); err != nil {
				return err
			}
			c, err = s.Compact(tx, 100)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		s.MarkDurable(100)
		if finish {
			if err := s.PhysicalCompact(c); err != nil {
				t.Fatal(err)
			}
		}
		apply(t, be, s, op{"b=1"})
		if _, cur, _ := s.Revs(); cur != 101 {
			t.Fatalf("revision after the jump and a put = %d, want 101", cur)
		}
		be.Close()
		be, err = storage.Open(filepath.Join(dir, "db"), storage.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		s2, err := Open(be, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, rev, err := s2.Range([]byte("a"), []byte("c"), RangeOptions{})
		if err != nil || rev != 101 || kvString(res.KVs) != "a=2@c2,m3,v2 b=1@c101,m101,v1 " {
			t.Fatalf("finished=%v: after restart rev %d, %q, %v", finish, rev, kvString(res.KVs), err)
		}
		if s2.CompactRev() != 100 {
			t.Fatalf("finished=%v: compaction revision after restart = %d, want 100", finish, s2.CompactRev())
		}
		be.Close()
	}
}

// A jump with nothing after it: the revision is found from the
// compaction point alone.
func TestJumpAloneSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	be, err := storage.Open(filepath.Join(dir, "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(be, nil)
	if err != nil {
		t.Fatal(err)
	}
	apply(t, be, s, op{"a=1"})
	err = be.Update(func(tx storage.WriteTx) error {
		if err := s.Jump(50); err != nil {
			return err
		}
		_, err := s.Compact(tx, 50)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
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
	if _, cur, _ := s2.Revs(); cur != 50 {
		t.Fatalf("revision after restart = %d, want 50", cur)
	}
}
