package wal

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	etcdwal "go.etcd.io/etcd/server/v3/storage/wal"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/repl"
)

func batch(from, n uint64) []repl.Entry {
	es := make([]repl.Entry, n)
	for i := range es {
		idx := from + uint64(i)
		es[i] = repl.Entry{Index: idx, Epoch: repl.Epoch{Term: 3, Node: 7}, Rev: int64(idx) + 1, Data: []byte{byte(idx), 1, 2, 3}}
	}
	return es
}

func sameIndexes(t *testing.T, got []repl.Entry, from, to uint64) {
	t.Helper()
	if uint64(len(got)) != to-from+1 {
		t.Fatalf("got %d entries, want %d..%d", len(got), from, to)
	}
	for i, e := range got {
		want := from + uint64(i)
		if e.Index != want || e.Rev != int64(want)+1 || e.Data[0] != byte(want) || e.Epoch.Node != 7 {
			t.Fatalf("entry %d read back as %+v", want, e)
		}
	}
}

// Entries appended survive a reopen, in order, with their contents; the
// reopened journal goes on from its last entry.
func TestAppendReopen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	j, es, err := Open(dir, Options{})
	if err != nil || len(es) != 0 {
		t.Fatalf("new journal: %d entries, %v", len(es), err)
	}
	if err := j.Append(batch(5, 3)); err != nil {
		t.Fatal(err)
	}
	if err := j.Append(batch(8, 2)); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	j, es = mustOpen(t, dir)
	sameIndexes(t, es, 5, 9)
	if j.Last() != 9 {
		t.Fatalf("last %d after reopen, want 9", j.Last())
	}
	if err := j.Append(batch(10, 1)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, es = mustOpen(t, dir)
	defer j.Close()
	sameIndexes(t, es, 5, 10)
}

// A batch that leaves a hole or goes back is refused, and nothing of it
// is written.
func TestAppendRefusesHoles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	j, _, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(batch(1, 2)); err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]repl.Entry{batch(4, 1), batch(2, 1), {batch(3, 1)[0], batch(5, 1)[0]}} {
		if err := j.Append(bad); !errors.Is(err, ErrNotContiguous) {
			t.Fatalf("appending %d.. after 2: %v, want ErrNotContiguous", bad[0].Index, err)
		}
	}
	j.Close()
	j, es := mustOpen(t, dir)
	defer j.Close()
	sameIndexes(t, es, 1, 2)
}

// Reset empties the journal, durably: a reopen finds nothing, and the
// next batch may start after the index given.
func TestReset(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	j, _ := mustOpen(t, dir)
	if err := j.Append(batch(1, 5)); err != nil {
		t.Fatal(err)
	}
	if err := j.Reset(20); err != nil {
		t.Fatal(err)
	}
	if j.Last() != 20 || j.Size() != 0 {
		t.Fatalf("after Reset(20): last %d, size %d", j.Last(), j.Size())
	}
	if err := j.Append(batch(6, 1)); !errors.Is(err, ErrNotContiguous) {
		t.Fatalf("append at 6 after Reset(20): %v", err)
	}
	if err := j.Append(batch(21, 2)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, es := mustOpen(t, dir)
	defer j.Close()
	sameIndexes(t, es, 21, 22)
}

// Reset moves the old journal aside and the sweeper deletes it: once the
// journal is closed nothing of it is left, and a directory moved aside
// that a crash left behind is deleted by the next Open, which reads only
// the journal itself.
func TestResetLeavesNothingAside(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "wal")
	aside := func() []string {
		t.Helper()
		olds, err := filepath.Glob(dir + asideSuffix + "*")
		if err != nil {
			t.Fatal(err)
		}
		return olds
	}
	j, _ := mustOpen(t, dir)
	for i := uint64(0); i < 3; i++ {
		if err := j.Append(batch(10*i+1, 5)); err != nil {
			t.Fatal(err)
		}
		if err := j.Reset(10*i + 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Append(batch(31, 2)); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if olds := aside(); len(olds) != 0 {
		t.Fatalf("after Close, journals moved aside remain: %v", olds)
	}
	// A crash between the rename and the sweep: an old journal, with
	// entries the data file holds, lies beside the live one.
	stale := dir + asideSuffix + "1"
	if err := os.MkdirAll(stale, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "0000000000000000-0000000000000000.wal"), []byte("stale"), 0o600); err != nil {
		t.Fatal(err)
	}
	j, es := mustOpen(t, dir)
	defer j.Close()
	sameIndexes(t, es, 31, 32)
	if olds := aside(); len(olds) != 0 {
		t.Fatalf("Open left journals moved aside: %v", olds)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// A record torn by a crash (its bytes half written at the tail) is cut
// off on open; everything before it is read back, and appending goes on.
func TestTornTail(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	j, _ := mustOpen(t, dir)
	if err := j.Append(batch(1, 3)); err != nil {
		t.Fatal(err)
	}
	big := batch(4, 1)
	big[0].Data = make([]byte, 4096)
	for i := range big[0].Data {
		big[0].Data[i] = 0xab
	}
	if err := j.Append(big); err != nil {
		t.Fatal(err)
	}
	j.Close()
	// Tear the last record: zero its second half, as a crash that lost
	// the sectors written last would.
	names, _ := filepath.Glob(filepath.Join(dir, "*.wal"))
	if len(names) != 1 {
		t.Fatalf("segments %v", names)
	}
	b, err := os.ReadFile(names[0])
	if err != nil {
		t.Fatal(err)
	}
	end := len(b)
	for end > 0 && b[end-1] == 0 {
		end--
	}
	f, err := os.OpenFile(names[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 2048), int64(end-2048)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	j, es := mustOpen(t, dir)
	sameIndexes(t, es, 1, 3)
	if err := j.Append(batch(4, 1)); err != nil {
		t.Fatal(err)
	}
	j.Close()
	j, es = mustOpen(t, dir)
	defer j.Close()
	sameIndexes(t, es, 1, 4)
}

// An etcd member's WAL (other metadata, raft's entries) is not taken for a
// journal.
func TestRefusesForeignWAL(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "wal")
	w, err := etcdwal.Create(zap.NewNop(), dir, []byte("an etcd member"))
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if j, _, err := Open(dir, Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
		if j != nil {
			j.Close()
		}
		t.Fatalf("opening an etcd WAL: %v, want ErrCorrupt", err)
	}
}

// BenchmarkAppendSync is the write path's floor: one entry of a
// put-sized request appended and fdatasynced (the disk's cost of one
// group commit). Run on the disk being measured:
// go test -run - -bench AppendSync ./internal/wal
func BenchmarkAppendSync(b *testing.B) {
	j, _, err := Open(filepath.Join(b.TempDir(), "wal"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	e := batch(1, 1)
	e[0].Data = make([]byte, 300)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e[0].Index = uint64(i) + 1
		if err := j.Append(e); err != nil {
			b.Fatal(err)
		}
	}
}

// mustOpen opens the journal in dir and returns it with the entries it
// held.
func mustOpen(t *testing.T, dir string) (*Journal, []repl.Entry) {
	t.Helper()
	j, es, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return j, es
}

// The commit bound appended with a batch is read back at Open (the newest
// one, a later batch without a bound keeping it), and a Reset forgets it.
func TestCommitBoundReopen(t *testing.T) {
	cases := []struct {
		name   string
		bounds []uint64 // one per batch of 2 entries (0: Append)
		reset  bool
		want   uint64
	}{
		{"none", []uint64{0, 0}, false, 0},
		{"newest", []uint64{3, 40}, false, 40},
		{"kept by a batch without one", []uint64{3, 0}, false, 3},
		{"bound above the entries' count", []uint64{1000}, false, 1000},
		{"reset", []uint64{5}, true, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "wal")
			j, _ := mustOpen(t, dir)
			next := uint64(1)
			for _, b := range c.bounds {
				if err := j.AppendCommit(batch(next, 2), b); err != nil {
					t.Fatal(err)
				}
				next += 2
			}
			if c.reset {
				if err := j.Reset(next - 1); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Close(); err != nil {
				t.Fatal(err)
			}
			j, _ = mustOpen(t, dir)
			defer j.Close()
			if got := j.Commit(); got != c.want {
				t.Fatalf("commit bound %d after reopen, want %d", got, c.want)
			}
		})
	}
}
