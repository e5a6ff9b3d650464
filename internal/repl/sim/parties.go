package sim

// The world's parties: everything on the network, by index. The nodes
// (the protocol's two zones) come first, at indexes 0 .. Nodes-1, and are
// the only parties the checker, the clients and the faults know. Any
// further party (Config.Listeners) is where a witness or a read-only
// observer will live: it gets every message a node sends to all, and
// becomes another progress entry in the core once the core has that role.
// None is built yet; a listener only counts what it hears, which keeps
// the room honest (broadcasts reach it; the pair runs as before).

// party is something the network delivers packets to.
type party interface {
	// receive takes a packet; it reports whether that was a step.
	receive(p Packet) bool
}

// listener is a passive party: it hears and answers nothing.
type listener struct {
	heard []int // packets heard, by sender
}

func (l *listener) receive(p Packet) bool {
	l.heard[p.From]++
	return false
}

// addParties makes the world's party list: its nodes, then n listeners.
func (w *World) addParties(n int) {
	for _, nd := range w.nodes {
		w.parties = append(w.parties, nd)
	}
	for range n {
		l := &listener{heard: make([]int, len(w.nodes)+n)}
		w.listeners = append(w.listeners, l)
		w.parties = append(w.parties, l)
	}
}
