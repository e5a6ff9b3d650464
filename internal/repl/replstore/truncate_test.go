package replstore

import (
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
)

// TruncateAfter leaves the log [first, keep] and the epoch records that
// start at or below keep, on disk as in the history it returns.
func TestTruncateAfter(t *testing.T) {
	be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	h := []repl.EpochRecord{{Epoch: repl.Epoch{Term: 1, Node: 1}, Start: 1}, {Epoch: repl.Epoch{Term: 2, Node: 1}, Start: 6, Solo: true}, {Epoch: repl.Epoch{Term: 3, Node: 1}, Start: 9}}
	var left []repl.EpochRecord
	err = be.Update(func(tx storage.WriteTx) error {
		for _, r := range h {
			if err := PutEpoch(tx, r); err != nil {
				return err
			}
		}
		for i := uint64(1); i <= 10; i++ {
			if err := Append(tx, &repl.Entry{Index: i, Epoch: repl.EpochAt(h, i), Data: []byte{byte(i)}}); err != nil {
				return err
			}
		}
		left, err = TruncateAfter(tx, h, 7)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left[1] != h[1] {
		t.Errorf("history left %+v, want the first two records of %+v", left, h)
	}
	be.View(func(tx storage.ReadTx) error {
		first, last, err := Bounds(tx)
		if err != nil || first != 1 || last != 7 {
			t.Errorf("log bounds %d..%d (%v), want 1..7", first, last, err)
		}
		disk, err := Epochs(tx)
		if err != nil || len(disk) != len(left) {
			t.Errorf("epoch records on disk %+v (%v), want %+v", disk, err, left)
		}
		return nil
	})
}
