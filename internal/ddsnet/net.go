package ddsnet

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// Config configures a Net.
type Config struct {
	DDS     dds.Config
	Cluster uint64 // messages of other clusters are dropped
	Node    uint64 // this node's ID; its own samples are dropped
	// Prefix of the topic names. Default "dyad".
	Prefix string
	// SendTimeout bounds how long Send blocks at the writer's high-water
	// mark. Default 2s.
	SendTimeout time.Duration
	// ReaderMaxSamples bounds each reader's history. Default 4096.
	ReaderMaxSamples int
}

// Net is one node's DDS transport.
type Net struct {
	cfg Config
	p   *dds.Participant
	w   [transport.NumClasses]*dds.Writer
	r   [transport.NumClasses]*dds.Reader

	mu      sync.Mutex
	started bool
	closed  bool

	// Samples the readers dropped: of another cluster, and this node's own.
	droppedForeign, droppedOwn atomic.Uint64
}

// Dropped reports how many received samples were dropped because they
// belong to another cluster, and because this node sent them. Counted
// before the drop, so a test can tell "dropped" from "not arrived yet".
func (n *Net) Dropped() (otherCluster, own uint64) {
	return n.droppedForeign.Load(), n.droppedOwn.Load()
}

var _ transport.Transport = (*Net)(nil)

// TopicName is the DDS topic of class c.
func TopicName(prefix string, c transport.Class) string { return prefix + "_" + c.String() }

// bestEffort reports whether class c travels BEST_EFFORT. Heartbeats do:
// each one restates the sender's whole state, so a lost one costs nothing,
// while a RELIABLE heartbeat topic stops delivering at the first lost frame
// for as long as the receiver's acknowledgements cannot reach the sender.
// On a link that fails one way that would make the side that still
// receives deaf too, and both would lead alone (docs/ARCHITECTURE.md,
// "One-way link failures"). Every other class is RELIABLE.
func bestEffort(c transport.Class) bool { return c == transport.Heartbeat }

// writerQoS is the writer QoS of class c: a BEST_EFFORT writer keeps only
// its newest sample (nothing waits for acknowledgement).
func writerQoS(c transport.Class, sendTimeout time.Duration) dds.QoS {
	if bestEffort(c) {
		return dds.QoS{BestEffort: true, HistoryDepth: 1, MaxBlockingTime: sendTimeout}
	}
	return dds.QoS{MaxBlockingTime: sendTimeout}
}

// New creates the participant and the writers; Start adds the readers.
func New(cfg Config) (*Net, error) {
	if cfg.Prefix == "" {
		cfg.Prefix = "dyad"
	}
	if cfg.SendTimeout <= 0 {
		cfg.SendTimeout = 2 * time.Second
	}
	if cfg.ReaderMaxSamples <= 0 {
		cfg.ReaderMaxSamples = 4096
	}
	p, err := dds.NewParticipant(cfg.DDS)
	if err != nil {
		return nil, err
	}
	n := &Net{cfg: cfg, p: p}
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		w, err := p.NewWriter(TopicName(cfg.Prefix, c), writerQoS(c, cfg.SendTimeout))
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("ddsnet: writer %s: %w", c, err)
		}
		n.w[c] = w
	}
	return n, nil
}

// Start implements transport.Transport.
func (n *Net) Start(h transport.Handler) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return transport.ErrClosed
	}
	if n.started {
		return errors.New("ddsnet: started twice")
	}
	n.started = true
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		class := c
		r, err := n.p.NewReader(TopicName(n.cfg.Prefix, c), dds.ReaderOptions{
			QoS:  dds.QoS{MaxSamples: n.cfg.ReaderMaxSamples, BestEffort: bestEffort(c)},
			Mode: dds.ReceiveThread,
			Handler: func(s *dds.Sample) {
				if s.Cluster != n.cfg.Cluster || s.Node == n.cfg.Node {
					if s.Cluster != n.cfg.Cluster {
						n.droppedForeign.Add(1)
					} else {
						n.droppedOwn.Add(1)
					}
					s.Release()
					return
				}
				m := &transport.Message{
					Class: class, Kind: s.Kind, Flags: s.Flags, Cluster: s.Cluster, From: s.Node,
					Term: s.Term, Index: s.Index, Payload: append([]byte(nil), s.Payload...),
				}
				s.Release()
				h(m)
			},
		})
		if err != nil {
			return fmt.Errorf("ddsnet: reader %s: %w", c, err)
		}
		n.r[c] = r
	}
	return nil
}

// Send implements transport.Transport.
func (n *Net) Send(m *transport.Message) error {
	if m.Class >= transport.NumClasses {
		return fmt.Errorf("ddsnet: no class %d", m.Class)
	}
	h := dds.Header{Kind: m.Kind, Flags: m.Flags, Cluster: n.cfg.Cluster, Node: n.cfg.Node, Term: m.Term, Index: m.Index}
	err := n.w[m.Class].Write(&h, m.Payload)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, dds.ErrTimeout):
		return transport.ErrTimeout
	case errors.Is(err, dds.ErrClosed):
		return transport.ErrClosed
	}
	return err
}

// PeerMatched implements transport.Transport.
func (n *Net) PeerMatched() bool {
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		if k, err := n.w[c].Matched(); err != nil || k < 1 {
			return false
		}
		if r := n.r[c]; r != nil {
			if k, err := r.Matched(); err != nil || k < 1 {
				return false
			}
		}
	}
	return true
}

// Close implements transport.Transport: it deletes the participant, so the
// peer sees this node leave at once.
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	return n.p.Close()
}
