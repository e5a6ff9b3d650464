package repl

import "testing"

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
		leader, _ := TrimEpochs(full, shared)
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
