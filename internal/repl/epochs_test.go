package repl

import (
	"path/filepath"
	"testing"

	"github.com/dyad-db/dyad/internal/storage"
)

// TestTrimEpochs: records whose entries all lie at or below the shared
// index go (from the history and from disk); the record covering the next
// index and every later one stay, and so does the newest record always.
func TestTrimEpochs(t *testing.T) {
	const a, b = 1, 2
	// A primary flipping between solo and synchronous: one record per flip.
	h := []EpochRecord{{Epoch{1, a}, 1, false}, {Epoch{2, a}, 5, true}, {Epoch{3, a}, 9, false}, {Epoch{4, a}, 12, true}, {Epoch{5, a}, 20, false}}
	tests := []struct {
		name     string
		h        []EpochRecord
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
			var got []EpochRecord
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
			var stored []EpochRecord
			be.View(func(tx storage.ReadTx) error {
				stored, err = Epochs(tx)
				return err
			})
			if !equalHistories(got, want) || !equalHistories(stored, want) {
				t.Fatalf("trimmed to %v, stored %v; want %v", got, stored, want)
			}
			if len(want) > 0 && HistoryFloor(got) > tt.shared+1 {
				t.Fatalf("floor %d is past shared+1 = %d", HistoryFloor(got), tt.shared+1)
			}
		})
	}
}

func equalHistories(x, y []EpochRecord) bool {
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

// TestTrimmedHistoriesCompare: comparing a trimmed history with one that
// still holds the dropped records finds the same answers as before the
// trim. Here the leader trimmed an old solo epoch of the follower's (both
// logs hold its entries): no split brain, and the logs part where they
// really do.
func TestTrimmedHistoriesCompare(t *testing.T) {
	const self, peer = 1, 2
	full := []EpochRecord{{Epoch{1, peer}, 1, false}, {Epoch{2, self}, 4, true}, {Epoch{3, self}, 8, false}, {Epoch{4, peer}, 12, true}}
	own := []EpochRecord{{Epoch{1, peer}, 1, false}, {Epoch{2, self}, 4, true}, {Epoch{3, self}, 8, false}, {Epoch{5, self}, 14, true}}
	const applied = 16
	for _, shared := range []uint64{0, 7, 11} {
		be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		var leader []EpochRecord
		err = be.Update(func(tx storage.WriteTx) error {
			leader, err = TrimEpochs(tx, full, shared)
			return err
		})
		be.Close()
		if err != nil {
			t.Fatal(err)
		}
		// Own entries 14-16 are solo writes the leader lacks: a split
		// brain, found whatever the leader trimmed; the old solo epoch 2
		// (entries 4-7, shared) never counts.
		if !SoloSuffix(own, leader, self, applied) {
			t.Errorf("shared %d: the split brain was missed", shared)
		}
		if SoloSuffix(own[:3], leader, self, 11) {
			t.Errorf("shared %d: the shared old solo epoch was taken for a split brain", shared)
		}
		if d := Divergence(own, leader, applied); d != 11 {
			t.Errorf("shared %d: Divergence = %d, want 11", shared, d)
		}
	}
}
