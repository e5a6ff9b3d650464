package etcdctl

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"
)

const watchWait = 15 * time.Second

// TestWatch runs `etcdctl watch` in the background and asserts the exact
// events it prints. Every watch starts at an explicit --rev, so the result
// does not depend on when the watch was established.
func TestWatch(t *testing.T) {
	c := newCtl(t)
	base := c.rev(t) + 1

	// History the watches replay: revs base.. base+5.
	c.put(t, "w1", "a")  // base
	c.put(t, "w2", "b")  // base+1
	c.put(t, "x1", "c")  // base+2
	c.put(t, "w1", "a2") // base+3
	c.ok(t, "del", "w2") // base+4
	c.put(t, "w10", "d") // base+5
	rev := func(d int) string { return fmt.Sprintf("--rev=%d", base+int64(d)) }

	t.Run("key from rev", func(t *testing.T) {
		w := c.start(t, "watch", "w1", rev(0))
		w.waitOutput(t, lines("PUT", "w1", "a", "PUT", "w1", "a2"), watchWait)
	})
	t.Run("key from later rev", func(t *testing.T) {
		w := c.start(t, "watch", "w1", rev(1))
		w.waitOutput(t, lines("PUT", "w1", "a2"), watchWait)
	})
	t.Run("prefix", func(t *testing.T) {
		w := c.start(t, "watch", "w", "--prefix", rev(0))
		w.waitOutput(t, lines(
			"PUT", "w1", "a",
			"PUT", "w2", "b",
			"PUT", "w1", "a2",
			"DELETE", "w2", "",
			"PUT", "w10", "d",
		), watchWait)
	})
	t.Run("range", func(t *testing.T) {
		w := c.start(t, "watch", "w1", "w2", rev(0)) // [w1, w2)
		w.waitOutput(t, lines("PUT", "w1", "a", "PUT", "w1", "a2", "PUT", "w10", "d"), watchWait)
	})
	t.Run("prev-kv", func(t *testing.T) {
		w := c.start(t, "watch", "w", "--prefix", "--prev-kv", rev(3))
		w.waitOutput(t, lines(
			"PUT", "w1", "a", "w1", "a2",
			"DELETE", "w2", "b", "w2", "",
			"PUT", "w10", "d",
		), watchWait)
	})
	t.Run("live events", func(t *testing.T) {
		from := c.rev(t) + 1
		w := c.start(t, "watch", "live", "--prefix", fmt.Sprintf("--rev=%d", from))
		c.put(t, "live1", "one")
		c.put(t, "other", "zzz")
		c.ok(t, "del", "live1")
		w.waitOutput(t, lines("PUT", "live1", "one", "DELETE", "live1", ""), watchWait)
	})
	t.Run("json revisions", func(t *testing.T) {
		type ev struct {
			Type int `json:"type"`
			Kv   kv  `json:"kv"`
		}
		// Events may arrive batched in one response or spread over several.
		parse := func(out string) ([]ev, error) {
			var evs []ev
			for _, l := range strings.Split(out, "\n") {
				if l == "" {
					continue
				}
				var r struct {
					Header header
					Events []ev
				}
				if err := json.Unmarshal([]byte(l), &r); err != nil {
					return nil, fmt.Errorf("watch -w json line %q: %v", l, err)
				}
				evs = append(evs, r.Events...)
			}
			return evs, nil
		}
		w := c.start(t, "watch", "w1", rev(0), "-w", "json")
		out := w.waitFunc(t, watchWait, func(out string) bool {
			evs, err := parse(out)
			return err != nil || len(evs) >= 2
		})
		evs, err := parse(out)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 2 {
			t.Fatalf("events = %+v, want 2", evs)
		}
		want := []kv{
			{Key: []byte("w1"), Value: []byte("a"), CreateRevision: base, ModRevision: base, Version: 1},
			{Key: []byte("w1"), Value: []byte("a2"), CreateRevision: base, ModRevision: base + 3, Version: 2},
		}
		for i := range want {
			if evs[i].Type != 0 || fmt.Sprint(evs[i].Kv) != fmt.Sprint(want[i]) {
				t.Errorf("event %d = %+v, want PUT %+v", i, evs[i], want[i])
			}
		}
	})
	t.Run("delete event json has mod revision", func(t *testing.T) {
		w := c.start(t, "watch", "w2", rev(2), "-w", "json")
		l := w.waitLines(t, 1, watchWait)[0]
		if !strings.Contains(l, `"type":1`) || !strings.Contains(l, fmt.Sprintf(`"mod_revision":%d`, base+4)) {
			t.Errorf("watch w2 delete event = %s; want type 1 (DELETE) with mod_revision %d", l, base+4)
		}
	})
}
