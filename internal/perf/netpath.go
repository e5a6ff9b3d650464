package perf

import (
	"fmt"
	"strings"
	"time"
)

// NetPath splits a dyad-ddsnet row's round trip into its layers, each
// the sum over the two directions (the ping and the pong). The ends stamp
// them on the host's wall clock, which both namespaces of a dyad perf run
// share, so the one layer that spans the two processes (Deliver) is
// measured too.
type NetPath struct {
	Count int // round trips stamped
	// Mean layers add up to the mean round trip (less the pinger's own
	// bookkeeping); medians do not add up, but they are what a typical
	// round trip pays where the tails of a loaded machine swamp the means.
	Mean, P50 NetLayers
}

// NetLayers are the layers of one round trip, both directions summed.
type NetLayers struct {
	// Write is Send on the sender: the cgo write, Cyclone's serialisation
	// and its send of the datagram on the writer's thread (over a veth
	// pair the kernel's delivery to the peer's socket runs inside it).
	Write time.Duration
	// Deliver runs from Send's return to the reader's notification on the
	// receiver: the rest of the kernel's delivery, Cyclone's receive
	// thread and its call into Go. It is negative when the receiver is
	// notified before the sender's write has returned.
	Deliver time.Duration
	// Wake runs from the notification to the consumer goroutine running
	// (its Ready fired): the Go scheduler's wake-up of a parked goroutine
	// on another thread. Zero when the consumer was not parked.
	Wake time.Duration
	// Take runs from the wake to the message in hand: Resume's take on
	// Cyclone's loan, the copy and the hand-over to the owner's queue.
	Take time.Duration
	// Turn is the responder from the ping in hand to its pong's Send.
	Turn time.Duration
}

// Sum is the round trip the layers account for.
func (l *NetLayers) Sum() time.Duration { return l.Write + l.Deliver + l.Wake + l.Take + l.Turn }

func netPathHeader() []string {
	return []string{"system", "size", "of", "rtt", "write", "deliver", "wake", "take", "turn", "unaccounted", "ddsperf p50"}
}

// netPathCells gives two lines per transport row that carries a NetPath,
// its means and its medians: the round trip, the layers (both directions
// summed), what they leave unaccounted (of the means: the pinger's own
// bookkeeping; of the medians: that medians do not add up) and the
// baseline's median at the same size for scale.
func (r *Results) netPathCells() [][]string {
	var out [][]string
	for _, x := range r.Rows {
		p := x.Path
		if p == nil || p.Count == 0 || x.Err != "" || !strings.HasPrefix(x.System, NetSystem) {
			continue
		}
		b, ok := r.find(r.Baseline+strings.TrimPrefix(x.System, NetSystem), x.Size) // "+sec" against the secured baseline
		if !ok {
			b, _ = r.find(r.Baseline, x.Size) // an experiment's row ("+lock") against the plain one
		}
		for _, v := range []struct {
			of     string
			rtt    time.Duration
			layers NetLayers
		}{{"mean", x.RTT.Mean, p.Mean}, {"p50", x.RTT.P50, p.P50}} {
			l := v.layers
			out = append(out, []string{x.System, fmt.Sprint(x.Size), v.of, dur(v.rtt), signedDur(l.Write), signedDur(l.Deliver), signedDur(l.Wake), signedDur(l.Take), signedDur(l.Turn),
				signedDur(v.rtt - l.Sum()), dur(b.RTT.P50)})
		}
	}
	return out
}

// signedDur is dur for a difference that may be negative or zero.
func signedDur(d time.Duration) string { return fmt.Sprintf("%.1fµs", float64(d)/1e3) }
