package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestWalkSnapshot: the walk visits every bucket in name order and each
// bucket's entries in key order, reports the database size, and refuses a
// file whose trailer does not match.
func TestWalkSnapshot(t *testing.T) {
	b, err := Open(filepath.Join(t.TempDir(), "db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Update(func(tx WriteTx) error {
		for _, kv := range [][3]string{{"lease", "b", "2"}, {"key", "z", "26"}, {"key", "a", "1"}, {"alarm", "x", "y"}} {
			if err := tx.Put([]byte(kv[0]), []byte(kv[1]), []byte(kv[2])); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	snap := filepath.Join(t.TempDir(), "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Snapshot(f, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()

	var buckets, entries []string
	cur := ""
	size, err := WalkSnapshot(snap,
		func(name []byte) error { cur = string(name); buckets = append(buckets, cur); return nil },
		func(k, v []byte) error {
			if slices.Contains([]string{"alarm", "key", "lease"}, cur) {
				entries = append(entries, fmt.Sprintf("%s/%s=%s", cur, k, v))
			}
			return nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSorted(buckets) {
		t.Errorf("buckets visited in the order %v", buckets)
	}
	want := []string{"alarm/x=y", "key/a=1", "key/z=26", "lease/b=2"}
	if !slices.Equal(entries, want) {
		t.Errorf("entries %v, want %v", entries, want)
	}
	st, err := os.Stat(snap)
	if err != nil {
		t.Fatal(err)
	}
	if size != st.Size()-32 {
		t.Errorf("size %d; the file is %d bytes with its 32-byte trailer", size, st.Size())
	}

	raw, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	raw[len(raw)/2] ^= 0x10
	bad := filepath.Join(t.TempDir(), "bad.db")
	if err := os.WriteFile(bad, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	called := false
	if _, err := WalkSnapshot(bad, func([]byte) error { called = true; return nil }, func(_, _ []byte) error { return nil }); !errors.Is(err, ErrCorrupt) || called {
		t.Fatalf("changed byte: WalkSnapshot = %v (walked: %v), want ErrCorrupt before any bucket", err, called)
	}
}
