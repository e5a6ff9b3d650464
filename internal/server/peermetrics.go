package server

import (
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// envelopeBytes is the size of a transport.Message's fixed fields (Class 1,
// Kind 2, Flags 4, Cluster, From, Term and Index 8 each), counted with the
// payload as the bytes of one message. It is what dyad puts on the wire
// per message, not the DDS/RTPS framing around it, which Cyclone adds and
// dyad cannot see.
const envelopeBytes = 1 + 2 + 4 + 5*8

// meteredTransport counts the replication traffic to and from the peer in
// etcd's peer series (etcd_network_peer_sent_bytes_total{To},
// etcd_network_peer_received_bytes_total{From},
// etcd_network_peer_sent_failures_total{To}), so that etcd's dashboards and
// alerts read dyad's link to its peer as etcd's link to a member.
//
// It also takes the peer's member records (repl.KindMember) off the
// delivery path, since they are not replication.
//
// The peer is named by its member ID in hex, as etcd names members. Until
// the first message from the peer arrives, its ID is not known and sends
// are counted under To="unknown" (a node that has never heard its peer).
type meteredTransport struct {
	transport.Transport
	m    *Metrics
	peer *atomic.Uint64 // the replication state's peerID (written by the apply loop)
	// seen is the last peer ID whose To series were created (only touched
	// by the receive handler, which the transport calls from one goroutine
	// at a time; atomic so that it needs no such promise).
	seen atomic.Uint64
	// onMember takes the peer's member records (repl.KindMember).
	onMember func(*transport.Message)
}

// newMeteredTransport wraps tr; a batching tr stays one (meteredBatcher),
// so that the apply loop still pulls batches from it (inbox.go) instead of
// having the transport's delivery thread block on a full inbox.
func newMeteredTransport(tr transport.Transport, m *Metrics, peer *atomic.Uint64, onMember func(*transport.Message)) transport.Transport {
	t := &meteredTransport{Transport: tr, m: m, peer: peer, onMember: onMember}
	if b, ok := tr.(transport.Batcher); ok {
		return &meteredBatcher{meteredTransport: t, b: b}
	}
	return t
}

func peerLabel(id uint64) string {
	if id == 0 {
		return "unknown"
	}
	return strconv.FormatUint(id, 16)
}

// Start wraps h so that every received message is counted before the
// owner sees it.
func (t *meteredTransport) Start(h transport.Handler) error {
	return t.Transport.Start(func(msg *transport.Message) {
		t.received(msg.From, envelopeBytes+len(msg.Payload))
		if msg.Kind == repl.KindMember {
			// Beside the protocol: never queued for the apply loop.
			t.onMember(msg)
			return
		}
		h(msg)
	})
}

// received counts bytes received from peer.
func (t *meteredTransport) received(peer uint64, bytes int) {
	from := peerLabel(peer)
	if t.seen.Swap(peer) != peer {
		// The To series of a newly heard peer start at zero, so that
		// rate() sees their first increase (a counter born at 1 shows
		// none) and dashboards find them before any failure.
		t.m.PeerSentFailures.WithLabelValues(from)
		t.m.PeerSentBytes.WithLabelValues(from)
	}
	t.m.PeerReceivedBytes.WithLabelValues(from).Add(float64(bytes))
}

// meteredBatcher is meteredTransport over a transport.Batcher: it counts
// and diverts in the batch handler. A batch the consumer refuses is offered
// again whole (transport.BatchHandler), so a batch is counted, and its
// member records taken, only once the consumer has taken the rest of it:
// each message is counted once, and each member record taken once.
type meteredBatcher struct {
	*meteredTransport
	b transport.Batcher
}

// StartBatch implements transport.Batcher.
func (t *meteredBatcher) StartBatch(h transport.BatchHandler) error {
	return t.b.StartBatch(func(ms []*transport.Message) bool {
		rest := ms
		if slices.ContainsFunc(ms, isMember) {
			rest = slices.DeleteFunc(slices.Clone(ms), isMember)
		}
		// Counted from what is read before h: once h has queued them,
		// the apply loop may handle and release them, and their storage
		// may then carry a later batch (transport.Message.Release).
		var buf [2]arrival
		got := arrivals(buf[:0], ms)
		if len(rest) > 0 && !h(rest) {
			return false // nothing taken; offered again by Resume
		}
		for _, a := range got {
			t.received(a.from, a.bytes)
		}
		for _, msg := range ms {
			if isMember(msg) {
				t.onMember(msg) // beside the protocol: never queued
				msg.Release()   // the record is unmarshalled: nothing aliases it
			}
		}
		return true
	})
}

// arrival is what a batch brought from one sender: bytes on the wire.
type arrival struct {
	from  uint64
	bytes int
}

// arrivals appends to into the bytes ms brought per sender, in runs of
// the same sender (a pair's batches come from its one peer: one run).
func arrivals(into []arrival, ms []*transport.Message) []arrival {
	for _, m := range ms {
		n := envelopeBytes + len(m.Payload)
		if k := len(into); k > 0 && into[k-1].from == m.From {
			into[k-1].bytes += n
			continue
		}
		into = append(into, arrival{m.From, n})
	}
	return into
}

func isMember(m *transport.Message) bool { return m.Kind == repl.KindMember }

// Ready implements transport.Batcher.
func (t *meteredBatcher) Ready() <-chan struct{} { return t.b.Ready() }

// Resume implements transport.Batcher.
func (t *meteredBatcher) Resume() { t.b.Resume() }

// MaxBatch implements transport.Batcher.
func (t *meteredBatcher) MaxBatch() int { return t.b.MaxBatch() }

// Send counts a message queued for the peer as sent, and a refused one as
// a failure (etcd counts a message it could not hand to the peer's stream
// the same way).
func (t *meteredTransport) Send(msg *transport.Message) error {
	to := peerLabel(t.peer.Load())
	if err := t.Transport.Send(msg); err != nil {
		t.m.PeerSentFailures.WithLabelValues(to).Inc()
		return err
	}
	t.m.PeerSentBytes.WithLabelValues(to).Add(float64(envelopeBytes + len(msg.Payload)))
	return nil
}

// SendAll implements transport.BatchSender: it counts as Send does, the
// messages the wrapped transport took as sent and the first it refused
// as a failure (the rest were not tried).
func (t *meteredTransport) SendAll(ms []*transport.Message) (int, error) {
	to := peerLabel(t.peer.Load())
	n, err := transport.SendAll(t.Transport, ms)
	var bytes int
	for _, msg := range ms[:n] {
		bytes += envelopeBytes + len(msg.Payload)
	}
	t.m.PeerSentBytes.WithLabelValues(to).Add(float64(bytes))
	if err != nil {
		t.m.PeerSentFailures.WithLabelValues(to).Inc()
	}
	return n, err
}

// observeAckRoundTrip records one replication round trip: from publishing
// a batch (already durable here) to the replica's acknowledgement of it
// (applied and durable there). It is dyad's peer round trip: unlike etcd's
// prober it includes the replica's fsync, which is what a write waits for.
func (s *Server) observeAckRoundTrip(d time.Duration) {
	s.m.LagSeconds.Observe(d.Seconds())
	s.m.PeerRoundTrip.WithLabelValues(peerLabel(s.repl.peerID.Load())).Observe(d.Seconds())
	// For dyad status: the newest round trip and when (detector clock).
	// Two stores, read without a lock: a reader may pair a round trip
	// with the time of the next one, which is harmless for a display.
	s.rtt.Store(int64(d))
	s.rttAt.Store(s.repl.clock.Now())
}
