package replstore

import (
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/internal/storage"
)

// TestFollowed: the term followed starts at 0, rises, never falls, and
// survives reopening the data file.
func TestFollowed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "db")
	be, err := storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	read := func(be *storage.Backend) uint64 {
		var got uint64
		if err := be.View(func(tx storage.ReadTx) error { got = Followed(tx); return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := read(be); got != 0 {
		t.Fatalf("fresh file: followed %d, want 0", got)
	}
	for _, step := range []struct{ put, want uint64 }{{5, 5}, {3, 5}, {7, 7}} {
		if err := be.Update(func(tx storage.WriteTx) error { return PutFollowed(tx, step.put) }); err != nil {
			t.Fatal(err)
		}
		if got := read(be); got != step.want {
			t.Fatalf("after PutFollowed(%d): followed %d, want %d", step.put, got, step.want)
		}
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	be, err = storage.Open(path, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	if got := read(be); got != 7 {
		t.Fatalf("reopened: followed %d, want 7", got)
	}
}
