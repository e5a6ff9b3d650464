package server_test

import (
	"slices"
	"sync"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// writeOrder records, in the order the primary's apply loop does them,
// its flushes (each journal append begins) and its sends of log entries,
// while armed. Both happen on the apply loop, so the order is exact.
type writeOrder struct {
	mu     sync.Mutex
	armed  bool
	events []string
}

func (w *writeOrder) add(ev string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.armed {
		w.events = append(w.events, ev)
	}
}

func (w *writeOrder) arm() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.armed, w.events = true, nil
}

func (w *writeOrder) get() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.events)
}

// entriesSends is a node's transport that tells order of every batch of
// log entries it sends.
type entriesSends struct {
	transport.Transport
	order *writeOrder
}

func (e *entriesSends) Send(m *transport.Message) error {
	if m.Kind == repl.KindEntries {
		e.order.add("send")
	}
	return e.Transport.Send(m)
}

// A primary sends a batch to its replica before its own flush only when
// the pair speaks ProtocolV3 or later, whose replica shows only what the
// commit index covers. Beside a replica of ProtocolV2, which shows an
// entry as soon as it persists it, it flushes first: were it to send
// first and crash before its flush, then lead again without the entry,
// that replica would already have served it to a read or a watch.
func TestPrimarySendsBeforeItsFlushOnlyFromProtocolV3(t *testing.T) {
	for _, tc := range []struct {
		name    string
		replica repl.ProtocolRange // zero: this build
		version uint16
		want    []string
	}{
		{"replica of v2", repl.ProtocolRange{Min: repl.ProtocolV1, Max: repl.ProtocolV2}, repl.ProtocolV2, []string{"flush", "send"}},
		{"replica of this build", repl.ProtocolRange{}, repl.Supported().Max, []string{"send", "flush"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net := transport.NewMemNet()
			order := &writeOrder{}
			a := pairNodeWith(t, net, t.TempDir(), 1, true, func(c *server.ReplConfig) {
				c.Transport = &entriesSends{Transport: c.Transport, order: order}
			})
			b := pairNodeWith(t, net, t.TempDir(), 2, false, func(c *server.ReplConfig) {
				server.SpeakProtocols(c, tc.replica)
			})
			waitRole(t, a, repl.RolePrimary)
			waitRole(t, b, repl.RoleReplica)
			waitProtocol(t, a, tc.version)
			put(t, a.cli, "k", "before")
			waitLease(t, b)

			// The flush is the journal's append: it makes a batch
			// durable (the data file commits later, off the path).
			server.InjectJournalFault(a.srv, func() error { order.add("flush"); return nil })
			order.arm()
			put(t, a.cli, "k", "v")
			// The put is acknowledged, so its batch was flushed here and
			// sent; nothing else is written while the pair is idle.
			if got := order.get(); !slices.Equal(got, tc.want) {
				t.Fatalf("at protocol %d the primary did %v for one write, want %v", tc.version, got, tc.want)
			}
			if v, _ := get(t, b.cli, "k"); v != "v" {
				t.Fatalf("the replica shows k=%q after the acknowledged write, want v", v)
			}
		})
	}
}
