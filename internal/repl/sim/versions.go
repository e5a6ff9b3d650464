package sim

import (
	"math/rand/v2"

	"github.com/dyad-db/dyad/internal/repl"
)

// Mixed versions (Config.Mixed): pairs in which one node, or both, run an
// older build that speaks protocol versions up to ProtocolV2 or up to
// ProtocolV3 only (Script.OldMax, drawn per seed), and
// rolling upgrades and rollbacks: a node stops (planned or not), comes
// back as the other build, and the pair settles the version it speaks
// anew. A pair speaking below ProtocolV3 writes as older builds did: the
// leader flushes a batch before it sends it, and an older replica shows
// what it persists (adapter_versions.go). The invariants are the same as
// for any run: no read older than an acknowledged write, no acknowledged
// entry lost or truncated, visible revisions never decrease.

// mix draws the nodes' builds and the build changes, from a random stream
// of its own, after the other faults.
func mix(s *Script, cfg Config) {
	rng := rand.New(rand.NewPCG(s.Seed, 0x01d8))
	// Which older build, from a stream of its own (the draws above are
	// those of the seeds from before ProtocolV4).
	s.OldMax = repl.ProtocolV2
	if rand.New(rand.NewPCG(s.Seed, 0x01d9)).IntN(2) == 0 {
		s.OldMax = repl.ProtocolV3
	}
	lease := int64(cfg.Lease)
	s.Old = make([]bool, cfg.Nodes)
	old := s.Old
	switch r := rng.IntN(4); r {
	case 0, 1: // one node of each build
		old[rng.IntN(cfg.Nodes)] = true
	case 2: // both older
		for i := range old {
			old[i] = true
		}
	}
	// The builds the nodes run next, as the changes drawn so far leave
	// them.
	next := append([]bool(nil), old...)
	var extra []Fault
	for t := 3 * lease; ; {
		t += int64(rng.ExpFloat64() * float64(4*cfg.FaultEvery))
		if t >= int64(cfg.Duration) {
			break
		}
		i := rng.IntN(cfg.Nodes)
		// Most changes upgrade an older node; some roll a node back.
		to := !next[i]
		if !next[i] && rng.IntN(3) != 0 {
			continue
		}
		next[i] = to
		b := Fault{At: t, Kind: FaultBuild, Node: i, Peer: b2int(to)}
		stop := Fault{At: t, Kind: FaultLeave, Node: i}
		if rng.IntN(3) == 0 {
			stop.Kind = FaultCrash
		}
		back := Fault{At: t + lease/4 + rng.Int64N(4*lease), Kind: FaultRestart, Node: i, Peer: rng.IntN(2)}
		extra = append(extra, stop, b, back)
	}
	s.Faults = append(s.Faults, extra...)
	sortFaults(s.Faults)
}

func b2int(b bool) int {
	if b {
		return 1
	}
	return 0
}
