package replstore

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
)

func TestLogAppendReadTrim(t *testing.T) {
	be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	now := time.Now().UnixNano()
	err = be.Update(func(tx storage.WriteTx) error {
		for i := uint64(1); i <= 100; i++ {
			ts := now
			if i <= 10 {
				ts = now - int64(time.Hour)
			}
			if err := Append(tx, &repl.Entry{Index: i, Epoch: repl.Epoch{Term: 1, Node: 1}, Time: ts, Data: make([]byte, 100)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	be.View(func(tx storage.ReadTx) error {
		es, err := Read(tx, 50, 400) // entries are 129 bytes each
		if err != nil || len(es) != 3 || es[0].Index != 50 || es[2].Index != 52 {
			t.Fatalf("read by size: %d entries, %v", len(es), err)
		}
		return nil
	})
	tests := []struct {
		name      string
		r         repl.Retention
		wantFirst uint64
	}{
		{"age", repl.Retention{MaxAge: int64(time.Minute), KeepLast: 5}, 11},
		{"size", repl.Retention{MaxBytes: 50 * 130, KeepLast: 5}, 0}, // checked as "about 50 left"
		{"keep last", repl.Retention{MaxBytes: 1, KeepLast: 5}, 96},
	}
	for _, tt := range tests {
		be.Update(func(tx storage.WriteTx) error {
			if _, err := Trim(tx, tt.r, now, 1000); err != nil {
				t.Fatal(err)
			}
			first, last, _ := Bounds(tx)
			if last != 100 {
				t.Fatalf("%s: last = %d", tt.name, last)
			}
			switch {
			case tt.wantFirst != 0 && first != tt.wantFirst:
				t.Fatalf("%s: first = %d, want %d", tt.name, first, tt.wantFirst)
			case tt.wantFirst == 0 && (100-first+1)*130 > 50*130+130:
				t.Fatalf("%s: %d entries left, over the size bound", tt.name, 100-first+1)
			}
			return nil
		})
	}
}
