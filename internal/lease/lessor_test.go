package lease

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/storage"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: time.Unix(1000, 0)} }
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, tc := range []struct{ id, ttl int64 }{{1, 5}, {0x7fffffffffffffff, MaxTTL}, {42, 0}} {
		id, ttl, err := DecodeRecord(EncodeRecord(tc.id, tc.ttl))
		if err != nil || id != tc.id || ttl != tc.ttl {
			t.Errorf("round trip %v: got %d %d %v", tc, id, ttl, err)
		}
	}
	// etcd with checkpointing also writes RemainingTTL (field 3): ignored.
	b := append(EncodeRecord(7, 9), 0x18, 0x03)
	if id, ttl, err := DecodeRecord(b); err != nil || id != 7 || ttl != 9 {
		t.Errorf("with remainingTTL: %d %d %v", id, ttl, err)
	}
	if _, _, err := DecodeRecord([]byte{0x08}); err == nil {
		t.Error("truncated record decoded without error")
	}
}

func TestLifecycle(t *testing.T) {
	be, err := storage.Open(filepath.Join(t.TempDir(), "db"), storage.Options{NoSync: true})
	must(t, err)
	defer be.Close()
	c := newClock()
	l := New(2, c.now)
	var ttl int64
	must(t, be.Update(func(tx storage.WriteTx) error { var err error; ttl, err = l.Grant(tx, 10, 1); return err }))
	if ttl != 2 {
		t.Fatalf("ttl below minimum granted as %d, want 2", ttl)
	}
	if err := l.CheckGrant(10, 5); err != ErrExists {
		t.Fatalf("duplicate grant: %v", err)
	}
	if err := l.CheckGrant(11, MaxTTL+1); err != ErrTTLTooLarge {
		t.Fatalf("huge TTL: %v", err)
	}
	l.Attach(10, []byte("b"))
	l.Attach(10, []byte("a"))
	c.add(1500 * time.Millisecond)
	if got := l.Expired(10); len(got) != 0 {
		t.Fatalf("expired too early: %v", got)
	}
	if _, err := l.Renew(10); err != nil {
		t.Fatal(err)
	}
	c.add(1500 * time.Millisecond)
	if got := l.Expired(10); len(got) != 0 {
		t.Fatalf("renewal ignored: %v", got)
	}
	c.add(time.Second)
	if got := l.Expired(10); len(got) != 1 || got[0] != 10 {
		t.Fatalf("expired = %v, want [10]", got)
	}
	if got := l.Expired(10); len(got) != 0 {
		t.Fatalf("expired lease handed out twice: %v", got)
	}
	if _, err := l.Renew(10); err != ErrNotFound {
		t.Fatalf("renewing an expired lease: %v", err)
	}
	// Reload from disk: the lease is back with its full TTL.
	l2 := New(2, c.now)
	must(t, be.View(l2.Load))
	le, err := l2.Get(10, false)
	if err != nil || le.TTL != 2 || le.Remaining != 2*time.Second {
		t.Fatalf("after reload: %+v %v", le, err)
	}
	var keys [][]byte
	must(t, be.Update(func(tx storage.WriteTx) error { var err error; keys, err = l.Revoke(tx, 10); return err }))
	if len(keys) != 2 || string(keys[0]) != "a" || string(keys[1]) != "b" {
		t.Fatalf("revoked keys = %q", keys)
	}
	l3 := New(2, c.now)
	must(t, be.View(l3.Load))
	if l3.Count() != 0 {
		t.Fatal("revoked lease still on disk")
	}
}

func TestIDGenPositiveUnique(t *testing.T) {
	g := NewIDGen(0xffff, time.Unix(1700000000, 0))
	seen := map[int64]bool{}
	for i := 0; i < 10000; i++ {
		id := g.Next()
		if id <= 0 || seen[id] {
			t.Fatalf("id %d: positive and unique expected", id)
		}
		seen[id] = true
	}
}
