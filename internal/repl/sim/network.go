package sim

import "math/rand/v2"

// Packet is one message between two parties (indexes into the world's
// node list). Payload is opaque to the network.
type Packet struct {
	From, To int
	Payload  any
}

// NetConfig is how the network treats packets while a link is not cut.
type NetConfig struct {
	// MinDelay and MaxDelay bound a packet's delay (ns); a delay drawn
	// per packet reorders packets of one link.
	MinDelay, MaxDelay int64
	// Drop and Dup are the probabilities of losing and of duplicating a
	// packet while the network is lossy (SetLossy); 0 otherwise.
	Drop, Dup float64
}

// Network carries packets between n parties on the world's queue. A cut
// direction loses every packet sent over it, and every packet in flight
// over it when it arrives. It owns no goroutine: delivery is an event.
type Network struct {
	cfg     NetConfig
	rng     *rand.Rand
	q       *Queue
	n       int
	cut     []bool // cut[from*n+to]
	lossy   bool
	deliver func(Packet)

	// Sent, Dropped and Duplicated are counters (figures).
	Sent, Dropped, Duplicated int
}

// NewNetwork returns a network of n parties; deliver is called for each
// packet that arrives.
func NewNetwork(n int, cfg NetConfig, rng *rand.Rand, q *Queue, deliver func(Packet)) *Network {
	return &Network{cfg: cfg, rng: rng, q: q, n: n, cut: make([]bool, n*n), deliver: deliver}
}

// Send puts p on the wire.
func (w *Network) Send(p Packet) {
	w.Sent++
	if w.Cut(p.From, p.To) {
		w.Dropped++
		return
	}
	copies := 1
	if w.lossy {
		if w.rng.Float64() < w.cfg.Drop {
			w.Dropped++
			return
		}
		if w.rng.Float64() < w.cfg.Dup {
			w.Duplicated++
			copies = 2
		}
	}
	for range copies {
		d := w.cfg.MinDelay
		if w.cfg.MaxDelay > d {
			d += w.rng.Int64N(w.cfg.MaxDelay - d + 1)
		}
		w.q.After(d, func() {
			if w.Cut(p.From, p.To) {
				w.Dropped++
				return
			}
			w.deliver(p)
		})
	}
}

// Cut reports whether the direction from -> to is cut.
func (w *Network) Cut(from, to int) bool { return w.cut[from*w.n+to] }

// SetCut cuts (or heals) the direction from -> to.
func (w *Network) SetCut(from, to int, cut bool) { w.cut[from*w.n+to] = cut }

// SetLossy turns random drops and duplicates on or off.
func (w *Network) SetLossy(on bool) { w.lossy = on }

// Lossy reports whether drops and duplicates are on.
func (w *Network) Lossy() bool { return w.lossy }

// HealAll heals every direction and turns losses off.
func (w *Network) HealAll() {
	clear(w.cut)
	w.lossy = false
}

// Healthy reports whether no direction is cut and the network is not lossy.
func (w *Network) Healthy() bool {
	for _, c := range w.cut {
		if c {
			return false
		}
	}
	return !w.lossy
}

// Isolated reports whether a and b are cut from each other both ways.
func (w *Network) Isolated(a, b int) bool { return w.Cut(a, b) && w.Cut(b, a) }
