package robustness

import (
	"strings"
	"testing"
)

func put(rev int64, key, val string) event { return event{Rev: rev, Key: key, Value: val} }
func del(rev int64, key string) event      { return event{Rev: rev, Key: key, Delete: true} }

func resp(header int64, evs ...event) response { return response{Header: header, Events: evs} }

// The validators must catch each kind of broken watch stream.
func TestValidateWatch(t *testing.T) {
	store := []response{resp(2, put(2, "a", "1")), resp(4, put(3, "b", "2"), del(4, "a"), put(4, "c", "3")), resp(5, put(5, "a", "4"))}
	tests := []struct {
		name string
		got  []response
		ref  []response
		want string // substring of the first problem; "" = none
	}{
		{name: "identical", got: store, ref: store},
		{name: "regrouped responses are fine", got: []response{resp(3, put(2, "a", "1"), put(3, "b", "2")), resp(5, del(4, "a"), put(4, "c", "3"), put(5, "a", "4"))}, ref: store},
		{name: "prefix only (watcher stopped early)", got: store[:2], ref: store},
		{name: "gap", got: []response{resp(2, put(2, "a", "1")), resp(5, put(5, "a", "4"))}, ref: store, want: "gap"},
		{name: "missing the first revision", got: store[1:], ref: store, want: "gap"},
		{name: "signalled gap (compacted, resumed at the compaction revision)", got: []response{store[0], {Header: 5, Skip: true}, store[2]}, ref: store},
		{name: "resumed below the compaction revision it was told", got: []response{store[0], {Header: 5, Skip: true}, store[1]}, ref: store, want: "out of order"},
		{name: "duplicate", got: []response{store[0], store[0]}, ref: store, want: "out of order"},
		{name: "out of order", got: []response{store[1], store[0]}, want: "out of order"},
		{name: "revision split over two responses", got: []response{resp(4, put(3, "b", "2"), del(4, "a")), resp(4, put(4, "c", "3"))}, want: "split revision"},
		{name: "revision incomplete", got: []response{store[0], resp(4, put(3, "b", "2"), del(4, "a"))}, ref: store, want: "revision 4"},
		{name: "wrong value", got: []response{resp(2, put(2, "a", "X"))}, ref: store, want: "revision 2"},
		{name: "header went back", got: []response{resp(9, put(2, "a", "1")), resp(4, put(3, "b", "2"))}, want: "older"},
		{name: "event newer than its header", got: []response{resp(1, put(2, "a", "1"))}, want: "newer than its header"},
		{name: "revision the store lacks", got: []response{resp(2, put(2, "a", "1")), resp(3, put(3, "z", "9"))}, ref: store[:1], want: "beyond"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := validateWatch(tc.got, tc.ref)
			switch {
			case tc.want == "" && len(p) > 0:
				t.Errorf("problems %v, want none", p)
			case tc.want != "" && len(p) == 0:
				t.Errorf("no problem found, want %q", tc.want)
			case tc.want != "" && !strings.Contains(strings.Join(p, "; "), tc.want):
				t.Errorf("problems %v, want one containing %q", p, tc.want)
			}
		})
	}
}

func TestLostWrites(t *testing.T) {
	history := byRevision([]response{resp(3, put(2, "a", "1"), put(3, "b", "2")), resp(4, del(4, "a"))})
	conflicts := map[int64][]ackedWrite{3: {{Rev: 3, Key: "c", Value: "diverged"}}}
	tests := []struct {
		name  string
		acked ackedWrite
		lost  bool
	}{
		{"put in the history", ackedWrite{Rev: 2, Key: "a", Value: "1"}, false},
		{"delete in the history", ackedWrite{Rev: 4, Key: "a", Delete: true}, false},
		{"put in a conflict record", ackedWrite{Rev: 3, Key: "c", Value: "diverged"}, false},
		{"wrong value", ackedWrite{Rev: 2, Key: "a", Value: "other"}, true},
		{"wrong revision", ackedWrite{Rev: 3, Key: "a", Value: "1"}, true},
		{"put acknowledged as a delete", ackedWrite{Rev: 2, Key: "a", Delete: true}, true},
		{"nowhere", ackedWrite{Rev: 9, Key: "x", Value: "y"}, true},
	}
	for _, tc := range tests {
		got := lostWrites([]ackedWrite{tc.acked}, history, conflicts)
		if (len(got) == 1) != tc.lost {
			t.Errorf("%s: lost %v, want lost=%v", tc.name, got, tc.lost)
		}
	}
}
