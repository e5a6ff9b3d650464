package transport

import (
	"sync"
)

// MemNet connects in-memory endpoints, for protocol tests. Each endpoint
// delivers each class in order on its own goroutine, owned by the endpoint
// and stopped by Close. Links can be cut one way (Block) to model partitions
// and one-way link loss; messages sent over a cut link are dropped, as DDS
// drops them once the peer is no longer matched. One class can be cut alone
// (BlockClass), as one DDS topic loses its match while the others still
// deliver.
type MemNet struct {
	mu        sync.Mutex
	endpoints map[uint64]*Mem
	blocked   map[[2]uint64]bool // [from, to]
	classCut  map[classLink]bool
}

// classLink is one class of the link from -> to.
type classLink struct {
	from, to uint64
	class    Class
}

// NewMemNet returns an empty network.
func NewMemNet() *MemNet {
	return &MemNet{endpoints: make(map[uint64]*Mem), blocked: make(map[[2]uint64]bool), classCut: make(map[classLink]bool)}
}

// Block cuts (or, with false, restores) the link from -> to.
func (n *MemNet) Block(from, to uint64, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.blocked[[2]uint64{from, to}] = cut
}

// BlockClass cuts (or, with false, restores) class c of the link from ->
// to; the link's other classes still deliver unless Block cuts them too.
func (n *MemNet) BlockClass(from, to uint64, c Class, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.classCut[classLink{from, to, c}] = cut
}

// Partition cuts or restores both directions between a and b.
func (n *MemNet) Partition(a, b uint64, cut bool) {
	n.Block(a, b, cut)
	n.Block(b, a, cut)
}

// Endpoint creates the endpoint of node id (cluster is the ID it stamps on
// what it sends and accepts).
func (n *MemNet) Endpoint(cluster, id uint64) *Mem {
	m := &Mem{net: n, cluster: cluster, id: id, done: make(chan struct{})}
	for c := range m.queues {
		m.queues[c] = make(chan *Message, 1<<14)
	}
	n.mu.Lock()
	n.endpoints[id] = m
	n.mu.Unlock()
	return m
}

// Mem is one node's in-memory Transport.
type Mem struct {
	net     *MemNet
	cluster uint64
	id      uint64

	queues [NumClasses]chan *Message
	wg     sync.WaitGroup
	done   chan struct{}

	closeOnce sync.Once
	startOnce sync.Once
}

// Start implements Transport.
func (m *Mem) Start(h Handler) error {
	m.startOnce.Do(func() {
		for c := range m.queues {
			q := m.queues[c]
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				for {
					select {
					case <-m.done:
						return
					case msg := <-q:
						h(msg)
					}
				}
			}()
		}
	})
	return nil
}

// Send implements Transport: it copies m to every other endpoint whose
// link from this node is not cut. As on DDS, every endpoint gets the copy
// whatever m.To says (the receiver filters), and To travels only in
// envelopes of VersionAddressed and later.
func (m *Mem) Send(msg *Message) error {
	select {
	case <-m.done:
		return ErrClosed
	default:
	}
	msg.Cluster = m.cluster
	msg.From = m.id
	return m.net.deliver(msg, m.done)
}

// Inject delivers msg as if node from of cluster had sent it, to every
// endpoint but from whose link from it is not cut: for tests that forge a
// node's traffic (late or duplicated messages, an impostor). It needs no
// endpoint of from.
func (n *MemNet) Inject(cluster, from uint64, msg *Message) error {
	cp := *msg
	cp.Cluster, cp.From = cluster, from
	return n.deliver(&cp, nil)
}

// deliver copies msg (Cluster and From set) to the endpoints it reaches.
// done is the sender's (nil: none); a closed one ends the delivery.
func (n *MemNet) deliver(msg *Message, done <-chan struct{}) error {
	n.mu.Lock()
	var to []*Mem
	for id, e := range n.endpoints {
		if id != msg.From && !n.blocked[[2]uint64{msg.From, id}] && !n.classCut[classLink{msg.From, id, msg.Class}] {
			to = append(to, e)
		}
	}
	n.mu.Unlock()
	for _, e := range to {
		if e.cluster != msg.Cluster {
			continue
		}
		cp := *msg
		cp.Payload = append([]byte(nil), msg.Payload...)
		if cp.EffectiveVersion() < VersionAddressed {
			cp.To = 0 // not in that envelope
		}
		select {
		case e.queues[msg.Class] <- &cp:
		case <-e.done:
		case <-done:
			return ErrClosed
		}
	}
	return nil
}

// PeerMatched implements Transport: true while another endpoint exists and
// every class of both directions is open.
func (m *Mem) PeerMatched() bool {
	m.net.mu.Lock()
	defer m.net.mu.Unlock()
	for id := range m.net.endpoints {
		if id != m.id && m.net.open(m.id, id) && m.net.open(id, m.id) {
			return true
		}
	}
	return false
}

// open reports whether every class of the link from -> to delivers.
// Called with n.mu held.
func (n *MemNet) open(from, to uint64) bool {
	if n.blocked[[2]uint64{from, to}] {
		return false
	}
	for c := Class(0); c < NumClasses; c++ {
		if n.classCut[classLink{from, to, c}] {
			return false
		}
	}
	return true
}

// Close implements Transport: it leaves the network and stops delivery.
func (m *Mem) Close() error {
	m.closeOnce.Do(func() {
		m.net.mu.Lock()
		if m.net.endpoints[m.id] == m {
			delete(m.net.endpoints, m.id)
		}
		m.net.mu.Unlock()
		close(m.done)
		m.wg.Wait()
	})
	return nil
}
