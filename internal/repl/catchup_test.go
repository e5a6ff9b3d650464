package repl

import "testing"

// TestCatchupVerdict: the leader sends entries only to an asker whose last
// entry it holds in the same epoch; an asker ahead of its log, or on
// another epoch there, diverged; one behind the log's start needs a
// snapshot.
func TestCatchupVerdict(t *testing.T) {
	e1, e2 := Epoch{Term: 1, Node: 1}, Epoch{Term: 2, Node: 2}
	tests := []struct {
		name        string
		c           CatchupReq
		first, last uint64
		prev        Epoch
		havePrev    bool
		want        uint32
	}{
		{"empty asker, whole log", CatchupReq{From: 1}, 1, 9, Epoch{}, false, 0},
		{"empty asker, trimmed log", CatchupReq{From: 1}, 5, 9, Epoch{}, false, FlagLogGone},
		{"empty asker, empty log", CatchupReq{From: 1}, 0, 0, Epoch{}, false, 0},
		{"same epoch at the asker's last entry", CatchupReq{From: 6, Prev: e1}, 1, 9, e1, true, 0},
		{"caught up", CatchupReq{From: 10, Prev: e1}, 1, 9, e1, true, 0},
		{"another epoch at the asker's last entry", CatchupReq{From: 6, Prev: e2}, 1, 9, e1, true, FlagDiverged},
		{"asker ahead of the log", CatchupReq{From: 12, Prev: e1}, 1, 9, Epoch{}, false, FlagDiverged},
		{"asker behind the log's start", CatchupReq{From: 3, Prev: e1}, 5, 9, Epoch{}, false, FlagLogGone},
		{"leader's log empty, asker not", CatchupReq{From: 3, Prev: e1}, 0, 0, Epoch{}, false, FlagDiverged},
		{"entry missing", CatchupReq{From: 6, Prev: e1}, 1, 9, Epoch{}, false, FlagLogGone},
	}
	for _, tt := range tests {
		if got := CatchupVerdict(tt.c, tt.first, tt.last, tt.prev, tt.havePrev); got != tt.want {
			t.Errorf("%s: verdict %d, want %d", tt.name, got, tt.want)
		}
	}
}
