package watch

import (
	"math/rand/v2"
	"testing"
)

// TestIndexMatchesScan checks the synced-watcher index against a scan of
// every watcher it holds: for random keys, each reports exactly the
// watchers whose range holds the key, once each, while watchers come and
// go. Keys are short strings over a tiny alphabet so that ranges nest,
// overlap, coincide (one group of several watchers), are unbounded or hold
// a single key, and groups empty and come back between lookups.
func TestIndexMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const alphabet = "abc"
	randKey := func() []byte {
		k := make([]byte, 1+rng.IntN(3))
		for i := range k {
			k[i] = alphabet[rng.IntN(len(alphabet))]
		}
		return k
	}
	newWatcher := func() *watcher {
		key := randKey()
		w := &watcher{key: key}
		switch rng.IntN(4) {
		case 0: // a single key
		case 1: // every key from key on
			w.end = []byte{}
		case 2: // the prefix key
			w.end = append([]byte(nil), key...)
			w.end[len(w.end)-1]++
		default: // [key, end) for a random end above key
			end := append(randKey(), 'a')
			if string(end) <= string(key) {
				end = append(append([]byte(nil), key...), end...)
			}
			w.end = end
		}
		return w
	}

	x := newIndex()
	var live []*watcher
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 4 || len(live) == 0:
			w := newWatcher()
			x.add(w)
			live = append(live, w)
		case op < 7:
			i := rng.IntN(len(live))
			x.remove(live[i])
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
		default:
			key := randKey()
			got := make(map[*watcher]int)
			x.each(key, func(w *watcher) { got[w]++ })
			want := 0
			for _, w := range live {
				if !w.contains(key) {
					if got[w] != 0 {
						t.Fatalf("step %d: key %q reported watcher [%q, %q)", step, key, w.key, w.end)
					}
					continue
				}
				want++
				if got[w] != 1 {
					t.Fatalf("step %d: key %q reported watcher [%q, %q) %d times, want once", step, key, w.key, w.end, got[w])
				}
			}
			if len(got) != want {
				t.Fatalf("step %d: key %q: %d watchers reported, %d hold it", step, key, len(got), want)
			}
		}
		if x.n != len(live) {
			t.Fatalf("step %d: index counts %d watchers, holds %d", step, x.n, len(live))
		}
	}
	seen := make(map[*watcher]bool)
	x.all(func(w *watcher) { seen[w] = true })
	if len(seen) != len(live) {
		t.Fatalf("all visited %d watchers, the index holds %d", len(seen), len(live))
	}
	for _, w := range live {
		if !seen[w] {
			t.Fatalf("all missed watcher [%q, %q)", w.key, w.end)
		}
	}
}
