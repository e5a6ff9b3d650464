package server_test

import (
	"sync"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// hbLog records the heartbeats one node sends. Tests use them as the
// node's progress marker instead of sleeping: each carries the role the
// node held and its own clock when it sent it, and the same tick evaluates
// the role rules right after sending (onTick), so a heartbeat shows that
// every earlier tick had run and what it left the role at.
type hbLog struct {
	mu  sync.Mutex
	hbs []repl.Heartbeat
}

// heartbeatLog listens on net as a passive third endpoint (it never sends,
// so the pair's decisions cannot depend on it) and records what node id
// sends. Its handler never blocks: a blocked endpoint would stall the
// sender's Send. The endpoint's ID is derived from id, so logs of both
// nodes can run at once (a second log of the same node replaces the
// first).
func heartbeatLog(t *testing.T, net *transport.MemNet, id uint64) *hbLog {
	t.Helper()
	l := &hbLog{}
	ep := net.Endpoint(0xd1ad, 0xbeef00+id)
	err := ep.Start(func(m *transport.Message) {
		if m.From != id || m.Kind != repl.KindHeartbeat {
			return
		}
		hb, err := repl.DecodeHeartbeat(m.Payload)
		if err != nil {
			return
		}
		l.mu.Lock()
		l.hbs = append(l.hbs, hb)
		l.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return l
}

// holds waits for a heartbeat showing role want, then reads on until one
// sent d later on the node's own clock, and fails if any in between shows
// another role: the node kept the role through d of its own running,
// however slowly the machine ran it.
func (l *hbLog) holds(t *testing.T, want repl.Role, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(20*testLease + 4*d)
	var from int64
	seen := false
	for next := 0; ; {
		l.mu.Lock()
		hbs := l.hbs[next:]
		next = len(l.hbs)
		l.mu.Unlock()
		for _, hb := range hbs {
			switch {
			case !seen && hb.Role == want:
				seen, from = true, hb.SentAt
			case seen && hb.Role != want:
				t.Fatalf("role %s %v after it showed %s", hb.Role, time.Duration(hb.SentAt-from), want)
			case seen && hb.SentAt-from >= int64(d):
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeats showing role %s for %v (seen: %v)", want, d, seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// never reads the heartbeats sent from now on until one sent d after the
// first, on the node's own clock, and fails if any shows role bad.
func (l *hbLog) never(t *testing.T, bad repl.Role, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(20*testLease + 4*d)
	l.mu.Lock()
	next := len(l.hbs)
	l.mu.Unlock()
	var from int64
	seen := false
	for {
		l.mu.Lock()
		hbs := l.hbs[next:]
		next = len(l.hbs)
		l.mu.Unlock()
		for _, hb := range hbs {
			if !seen {
				seen, from = true, hb.SentAt
			}
			if hb.Role == bad {
				t.Fatalf("role %s %v into the window", bad, time.Duration(hb.SentAt-from))
			}
			if hb.SentAt-from >= int64(d) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no heartbeats for %v (seen: %v)", d, seen)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
