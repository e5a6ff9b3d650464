package replstore

import (
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/storage"
)

// TestTrimEpochs: records whose entries all lie at or below the shared
// index go (from the history and from disk); the record covering the next
// index and every later one stay, and so does the newest record always.
func TestTrimEpochs(t *testing.T) {
	const a, b = 1, 2
	// A primary flipping between solo and synchronous: one record per flip.
	h := []repl.EpochRecord{{Epoch: repl.Epoch{Term: 1, Node: a}, Start: 1, Solo: false}, {Epoch: repl.Epoch{Term: 2, Node: a}, Start: 5, Solo: true}, {Epoch: repl.Epoch{Term: 3, Node: a}, Start: 9, Solo: false}, {Epoch: repl.Epoch{Term: 4, Node: a}, Start: 12, Solo: true}, {Epoch: repl.Epoch{Term: 5, Node: a}, Start: 20, Solo: false}}
	tests := []struct {
		name     string
		h        []repl.EpochRecord
		shared   uint64
		wantFrom int // index into h of the first record left
	}{
		{"nothing shared", h, 0, 0},
		{"inside the first epoch", h, 3, 0},
		{"the first epoch's last entry", h, 4, 1},
		{"inside a later epoch", h, 10, 2},
		{"the next epoch's first entry", h, 12, 3},
		{"past every start: the newest stays", h, 100, 4},
		{"one record", h[:1], 100, 0},
		{"empty", nil, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer be.Close()
			var got []repl.EpochRecord
			err = be.Update(func(tx storage.WriteTx) error {
				for _, r := range tt.h {
					if err := PutEpoch(tx, r); err != nil {
						return err
					}
				}
				got, err = TrimEpochs(tx, tt.h, tt.shared)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			want := tt.h[min(tt.wantFrom, len(tt.h)):]
			var stored []repl.EpochRecord
			be.View(func(tx storage.ReadTx) error {
				stored, err = Epochs(tx)
				return err
			})
			if !equalHistories(got, want) || !equalHistories(stored, want) {
				t.Fatalf("trimmed to %v, stored %v; want %v", got, stored, want)
			}
			if len(want) > 0 && repl.HistoryFloor(got) > tt.shared+1 {
				t.Fatalf("floor %d is past shared+1 = %d", repl.HistoryFloor(got), tt.shared+1)
			}
		})
	}
}

func equalHistories(x, y []repl.EpochRecord) bool {
	if len(x) != len(y) {
		return false
	}
	for i := range x {
		if x[i] != y[i] {
			return false
		}
	}
	return true
}
