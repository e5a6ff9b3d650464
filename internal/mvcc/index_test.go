package mvcc

import (
	"fmt"
	"slices"
	"sort"
	"testing"
)

// buildKeyIndex makes a keyIndex from lives: each inner slice is one
// generation's main revisions; every life but the last ends with its
// tombstone (its last revision), the last one is open.
func buildKeyIndex(lives ...[]int64) *keyIndex {
	ki := &keyIndex{key: []byte("k"), gens: []generation{{}}}
	for i, life := range lives {
		for j, r := range life {
			if i < len(lives)-1 && j == len(life)-1 {
				ki.tombstone(Revision{Main: r})
			} else {
				ki.put(Revision{Main: r})
			}
		}
	}
	return ki
}

func mains(keep map[Revision]struct{}) []int64 {
	var out []int64
	for r := range keep {
		out = append(out, r.Main)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func gensString(ki *keyIndex) string {
	var out [][]int64
	for _, g := range ki.gens {
		var l []int64
		for _, r := range g.revs {
			l = append(l, r.Main)
		}
		out = append(out, l)
	}
	return fmt.Sprint(out)
}

// The expectations follow etcd 3.5.35's keyIndex.compact and keyIndex.keep.
func TestKeyIndexCompactAndKeep(t *testing.T) {
	tests := []struct {
		name     string
		lives    [][]int64
		at       int64
		gens     string  // generations left after compact(at)
		keep     []int64 // what compact keeps
		hashKeep []int64 // what keep (HashKV) keeps
	}{
		{"before first put", [][]int64{{2, 4}}, 1, "[[2 4]]", nil, nil},
		{"middle of open life", [][]int64{{2, 4, 6}}, 5, "[[4 6]]", []int64{4}, []int64{4}},
		{"exactly at a put", [][]int64{{2, 4, 6}}, 4, "[[4 6]]", []int64{4}, []int64{4}},
		{"tombstone before at", [][]int64{{2, 3}, {5}}, 4, "[[5]]", nil, nil},
		{"tombstone exactly at", [][]int64{{2, 3}, {5}}, 3, "[[3] [5]]", []int64{3}, nil},
		{"tombstone after at", [][]int64{{2, 3, 6}, {7}}, 4, "[[3 6] [7]]", []int64{3}, []int64{3}},
		{"deleted, nothing open", [][]int64{{2, 3}, {}}, 9, "[[]]", nil, nil},
		{"deleted exactly at, nothing open", [][]int64{{2, 3}, {}}, 3, "[[3] []]", []int64{3}, nil},
		{"second life", [][]int64{{2, 3}, {5, 8}}, 6, "[[5 8]]", []int64{5}, []int64{5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ki := buildKeyIndex(tt.lives...)
			hk := make(map[Revision]struct{})
			ki.keepOnly(tt.at, hk)
			if fmt.Sprint(mains(hk)) != fmt.Sprint(tt.hashKeep) {
				t.Errorf("keep(%d) = %v, want %v", tt.at, mains(hk), tt.hashKeep)
			}
			if before := gensString(buildKeyIndex(tt.lives...)); gensString(ki) != before {
				t.Errorf("keep changed the index: %s, was %s", gensString(ki), before)
			}
			ck := make(map[Revision]struct{})
			ki.compact(tt.at, ck)
			if fmt.Sprint(mains(ck)) != fmt.Sprint(tt.keep) {
				t.Errorf("compact(%d) kept %v, want %v", tt.at, mains(ck), tt.keep)
			}
			if got := gensString(ki); got != tt.gens {
				t.Errorf("compact(%d) left %s, want %s", tt.at, got, tt.gens)
			}
		})
	}
}

// The index's point lookups (byKey) and its ordered tree hold the same
// keys through creates and compactions: a key compacted away is gone from
// both, and a key created again is found again.
func TestIndexLookupsFollowTheTree(t *testing.T) {
	type step struct {
		put, del string // key to put or delete at the next revision ("": none)
		compact  bool
	}
	cases := []struct {
		name  string
		steps []step
		want  []string // keys the index holds at the end, in order
	}{
		{"puts", []step{{put: "b"}, {put: "a"}, {put: "c"}, {put: "a"}}, []string{"a", "b", "c"}},
		{"deleted and compacted", []step{{put: "a"}, {put: "b"}, {del: "a"}, {compact: true}}, []string{"b"}},
		{"deleted, not compacted", []step{{put: "a"}, {put: "b"}, {del: "a"}}, []string{"a", "b"}},
		{"compacted, then back", []step{{put: "a"}, {del: "a"}, {compact: true}, {put: "a"}}, []string{"a"}},
		{"empty key space", []step{{put: "a"}, {del: "a"}, {put: "b"}, {del: "b"}, {compact: true}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			x := newIndex()
			rev := int64(1)
			for _, s := range tc.steps {
				rev++
				switch {
				case s.put != "":
					x.getOrCreate([]byte(s.put)).put(Revision{Main: rev})
				case s.del != "":
					ki := x.get([]byte(s.del))
					if ki == nil {
						t.Fatalf("delete %q: not in the index", s.del)
					}
					ki.tombstone(Revision{Main: rev})
				case s.compact:
					x.compact(rev)
				}
			}
			var inTree []string
			x.tree.Ascend(func(ki *keyIndex) bool {
				inTree = append(inTree, string(ki.key))
				return true
			})
			if fmt.Sprint(inTree) != fmt.Sprint(tc.want) {
				t.Fatalf("tree holds %q, want %q", inTree, tc.want)
			}
			if len(x.byKey) != len(inTree) {
				t.Fatalf("byKey holds %d keys, the tree %d", len(x.byKey), len(inTree))
			}
			for _, k := range inTree {
				ki := x.get([]byte(k))
				if ki == nil || string(ki.key) != k {
					t.Fatalf("get(%q) = %v, want the tree's keyIndex", k, ki)
				}
				var inOrder *keyIndex
				x.ascend([]byte(k), []byte(k+"\x00"), func(ki *keyIndex) bool { inOrder = ki; return false })
				if inOrder != ki {
					t.Fatalf("get(%q) and the tree disagree", k)
				}
			}
			for _, k := range []string{"a", "b", "c"} {
				if !slices.Contains(inTree, k) && x.get([]byte(k)) != nil {
					t.Fatalf("get(%q) finds a key the tree does not hold", k)
				}
			}
		})
	}
}
