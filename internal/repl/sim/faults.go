package sim

import "math/rand/v2"

// The extended fault set (Config.Extended): hand-overs (a planned
// `dyad hand-over`, or a final one after a storage failure), the outcomes
// of the fence command a replica runs before it promotes itself (success,
// failure, slow), and changes of a node's clock rate within the drift
// bound. They are drawn from a random stream of their own, after the base
// script, so a seed's base faults and client operations are the same with
// and without them.
//
// Their invariants (checked in adapter_faults.go and check.go):
//   - a node that runs a fence command promotes itself only right after
//     one succeeded, and a failed one leaves it not leading;
//   - a node whose hand-over was answered "done" does not lead;
//   - every node's clock runs within MaxDriftPPM of virtual time and
//     never backwards within a run (Checker.Clock);
//   - and all the others: a hand-over or a slow fence must not lose an
//     acknowledged write or let two leaders acknowledge.

// extend adds the extended faults to s (drawn after its base faults).
func extend(s *Script, cfg Config) {
	rng := rand.New(rand.NewPCG(s.Seed, 0xe47e4d))
	lease := int64(cfg.Lease)
	s.Fence = rng.IntN(2) == 0
	var extra []Fault
	for t := 3 * lease; ; {
		t += int64(rng.ExpFloat64() * float64(3*cfg.FaultEvery))
		if t >= int64(cfg.Duration) {
			break
		}
		f := Fault{At: t, Node: rng.IntN(cfg.Nodes)}
		switch r := rng.IntN(100); {
		case r < 45:
			f.Kind = FaultHandover
			if rng.IntN(4) == 0 {
				// Final: the node stops once it handed over (or at once,
				// if it could not); most come back.
				f.Peer = 1
				extra = append(extra, Fault{At: t + lease/2 + rng.Int64N(6*lease), Kind: FaultRestart, Node: f.Node, Peer: rng.IntN(2)})
			}
		case r < 75 && s.Fence:
			f.Kind, f.Peer = FaultFence, rng.IntN(2)
			if rng.IntN(2) == 0 {
				f.D = 1 + rng.Int64N(lease/20) // a quick command
			} else {
				f.D = lease/2 + rng.Int64N(3*lease) // a slow one
			}
		default:
			f.Kind, f.D = FaultDrift, rng.Int64N(2*cfg.MaxDriftPPM+1)-cfg.MaxDriftPPM
		}
		extra = append(extra, f)
	}
	s.Faults = append(s.Faults, extra...)
	sortFaults(s.Faults)
}

// fence is how a node's fence command turns out.
type fence struct {
	fail bool
	d    int64 // how long it runs (virtual ns)
}

// quickFence is the fence command's outcome until a FaultFence says
// otherwise (and again once everything heals).
const quickFence = int64(20e6)

// extendedFault injects a fault of the extended set.
func (w *World) extendedFault(f Fault) {
	n := w.nodes[f.Node]
	switch f.Kind {
	case FaultHandover:
		n.handOver(f.Peer == 1)
	case FaultFence:
		n.fence = fence{fail: f.Peer == 1, d: f.D}
	case FaultDrift:
		n.clock.SetRate(w.q.Now(), f.D)
	}
}

// failoverBound is how long a survivor may take to lead beyond the two
// leases of failure detection (its fence command); ok is false when no
// bound applies (the command fails, or is slower than the detection).
func (n *node) failoverBound() (extra int64, ok bool) {
	if !n.w.script.Fence {
		return 0, true
	}
	if n.fence.fail || n.fence.d > int64(n.w.cfg.Lease)/4 {
		return 0, false
	}
	return n.fence.d, true
}
