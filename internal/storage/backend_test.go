package storage

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

const testKeys = 3000

// fill creates a data file holding testKeys keys and closes it cleanly.
func fill(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "member", "snap", "db")
	b, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = b.Update(func(tx WriteTx) error {
		for i := 0; i < testKeys; i++ {
			k := []byte(fmt.Sprintf("k%06d", i))
			if err := tx.Put(BucketKey, k, bytes.Repeat(k, 10)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func pageSize(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	return int64(db.Info().PageSize)
}

// keyBucketRoot is the page id of the key bucket's root page.
func keyBucketRoot(t *testing.T, path string) int64 {
	t.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var root int64
	db.View(func(tx *bolt.Tx) error {
		root = int64(tx.Bucket(BucketKey).Root())
		return nil
	})
	if root < 2 {
		t.Fatalf("key bucket root page %d: expected a page of its own", root)
	}
	return root
}

func garble(t *testing.T, path string, page, size int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := make([]byte, size)
	rand.New(rand.NewSource(page)).Read(junk)
	if _, err := f.WriteAt(junk, page*size); err != nil {
		t.Fatal(err)
	}
}

// TestOpenAfterTornPages garbles pages of a cleanly closed data file and
// checks that Open either recovers every key (one meta page lost: bbolt
// uses the other, and a clean Close leaves both describing the final
// state) or refuses with ErrCorrupt; it never opens a file that then
// serves something else.
func TestOpenAfterTornPages(t *testing.T) {
	tests := []struct {
		name    string
		pages   func(t *testing.T, path string) []int64
		wantErr bool
	}{
		{"intact", func(*testing.T, string) []int64 { return nil }, false},
		{"meta page 0", func(*testing.T, string) []int64 { return []int64{0} }, false},
		{"meta page 1", func(*testing.T, string) []int64 { return []int64{1} }, false},
		{"both meta pages", func(*testing.T, string) []int64 { return []int64{0, 1} }, true},
		{"key bucket root page", func(t *testing.T, p string) []int64 { return []int64{keyBucketRoot(t, p)} }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := fill(t)
			ps := pageSize(t, path)
			for _, pg := range tt.pages(t, path) {
				garble(t, path, pg, ps)
			}
			b, err := Open(path, Options{})
			if tt.wantErr {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer b.Close()
			n := 0
			err = b.View(func(tx ReadTx) error {
				return tx.Scan(BucketKey, nil, nil, func(k, v []byte) (bool, error) {
					if !bytes.Equal(v, bytes.Repeat(k, 10)) {
						return false, fmt.Errorf("key %s holds %q", k, v)
					}
					n++
					return true, nil
				})
			})
			if err != nil || n != testKeys {
				t.Fatalf("read %d of %d keys: %v", n, testKeys, err)
			}
		})
	}
}

// TestVerifySnapshotDetectsAFlippedByte checks the SHA-256 trailer of a
// snapshot file catches any changed byte.
func TestVerifySnapshotDetectsAFlippedByte(t *testing.T) {
	b, err := Open(filepath.Join(t.TempDir(), "db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	snap := filepath.Join(t.TempDir(), "snap.db")
	f, err := os.Create(snap)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Snapshot(f, nil); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if _, err := VerifySnapshot(snap); err != nil {
		t.Fatalf("intact snapshot: %v", err)
	}
	raw, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, off := range []int{0, len(raw) / 2, len(raw) - 1} {
		bad := bytes.Clone(raw)
		bad[off] ^= 0x10
		p := filepath.Join(t.TempDir(), "bad.db")
		if err := os.WriteFile(p, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := VerifySnapshot(p); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: VerifySnapshot = %v, want ErrCorrupt", off, err)
		}
		if err := RestoreSnapshot(p, filepath.Join(t.TempDir(), "restored")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("byte %d flipped: RestoreSnapshot = %v, want ErrCorrupt", off, err)
		}
	}
}
