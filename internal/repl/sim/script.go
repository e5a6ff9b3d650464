package sim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// FaultKind is a kind of injected fault.
type FaultKind uint8

// The faults. Node (and Peer) are node indexes; D a duration (ns).
const (
	FaultCut     FaultKind = iota + 1 // cut the direction Node -> Peer
	FaultCutBoth                      // cut Node and Peer from each other both ways
	FaultHeal                         // heal every direction, stop losses
	FaultLossy                        // drop and duplicate packets at random until healed
	FaultCrash                        // Node crashes: its disk loses what was not synced
	FaultRestart                      // Node restarts from its disk (a reboot when Peer == 1)
	FaultFreeze                       // Node stops stepping for D, then resumes with a jump
	FaultLeave                        // Node stops on purpose (a replica says it is leaving)
	// The extended set (Config.Extended; faults.go).
	FaultHandover // Node, if a synchronous primary, hands its role over (Peer == 1: final, its storage failed)
	FaultFence    // Node's fence commands from now on run for D and succeed (Peer 0) or fail (Peer 1)
	FaultDrift    // Node's clock rate changes to D ppm (within the world's bound)
	// Mixed versions (Config.Mixed; versions.go).
	FaultBuild // Node's next run is of the older build (Peer 1) or of this build (Peer 0)
)

func (k FaultKind) String() string {
	return [...]string{"?", "cut", "cut-both", "heal", "lossy", "crash", "restart", "freeze", "leave", "hand-over", "fence", "drift", "build"}[k]
}

// Fault is one fault at virtual time At.
type Fault struct {
	At   int64
	Kind FaultKind
	Node int
	Peer int
	D    int64
}

func (f Fault) String() string {
	s := fmt.Sprintf("%8.3fs %s", float64(f.At)/1e9, f.Kind)
	switch f.Kind {
	case FaultCut:
		s += fmt.Sprintf(" %d->%d", f.Node, f.Peer)
	case FaultCutBoth:
		s += fmt.Sprintf(" %d<->%d", f.Node, f.Peer)
	case FaultCrash, FaultLeave:
		s += fmt.Sprintf(" node %d", f.Node)
	case FaultRestart:
		s += fmt.Sprintf(" node %d (reboot %v)", f.Node, f.Peer == 1)
	case FaultFreeze:
		s += fmt.Sprintf(" node %d for %v", f.Node, time.Duration(f.D))
	case FaultHandover:
		s += fmt.Sprintf(" node %d (final %v)", f.Node, f.Peer == 1)
	case FaultFence:
		s += fmt.Sprintf(" node %d: %s after %v", f.Node, [...]string{"succeeds", "fails"}[f.Peer&1], time.Duration(f.D))
	case FaultDrift:
		s += fmt.Sprintf(" node %d to %d ppm", f.Node, f.D)
	case FaultBuild:
		s += fmt.Sprintf(" node %d: %s from its next start", f.Node, [...]string{"this build", "the older build"}[f.Peer&1])
	}
	return s
}

// ClientOp is one operation of a client: issued Gap after the previous
// one ended.
type ClientOp struct {
	Gap int64
	Put bool
	Key int
}

// Script is everything a run does on purpose; the network's randomness
// comes from the seed.
type Script struct {
	Seed    uint64
	Faults  []Fault // by time
	Clients [][]ClientOp
	// PPM is each node's clock drift.
	PPM []int64
	// Ops are single operations at fixed times (scripted scenarios), each
	// issued by a client of its own.
	Ops []TimedOp
	// Fence: the nodes run a fence command before they promote
	// themselves (its outcomes are FaultFence's).
	Fence bool
	// Old: node i starts as an older build, which speaks protocol
	// versions up to OldMax only (Config.Mixed; versions.go).
	Old []bool
	// OldMax is the highest protocol version the older build speaks:
	// ProtocolV2 (0 means it), whose leader flushes before it sends and
	// whose replica shows what it persists, or ProtocolV3, whose replica
	// commits only what its leader's commit index covers.
	OldMax uint16
}

// TimedOp is one client operation issued at At on node Node.
type TimedOp struct {
	At   int64
	Node int
	Op   ClientOp
}

// Len is the number of faults and client operations.
func (s *Script) Len() (faults, ops int) {
	for _, c := range s.Clients {
		ops += len(c)
	}
	return len(s.Faults), ops
}

func (s *Script) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, clock drift %v ppm, fence command %v, older builds %v (up to %v)\n", s.Seed, s.PPM, s.Fence, s.Old, s.olderBuild())
	for _, f := range s.Faults {
		fmt.Fprintf(&b, "  fault %s\n", f)
	}
	for i, c := range s.Clients {
		fmt.Fprintf(&b, "  client %d: %d ops\n", i, len(c))
	}
	return b.String()
}

// Generate draws a script from seed under cfg.
func Generate(seed uint64, cfg Config) Script {
	cfg = cfg.withDefaults()
	rng := rand.New(rand.NewPCG(seed, 0x5c1e7))
	s := Script{Seed: seed, PPM: make([]int64, cfg.Nodes)}
	for i := range s.PPM {
		s.PPM[i] = rng.Int64N(2*cfg.MaxDriftPPM+1) - cfg.MaxDriftPPM
	}
	lease := int64(cfg.Lease)
	down := make([]bool, cfg.Nodes)
	// Faults: a Poisson stream, mean gap FaultEvery, after a calm start
	// in which the pair forms.
	for t := 3 * lease; ; {
		t += int64(rng.ExpFloat64() * float64(cfg.FaultEvery))
		if t >= int64(cfg.Duration) {
			break
		}
		f := Fault{At: t, Node: rng.IntN(cfg.Nodes)}
		f.Peer = (f.Node + 1 + rng.IntN(cfg.Nodes-1)) % cfg.Nodes
		switch r := rng.IntN(100); {
		case r < 14:
			f.Kind = FaultCut
		case r < 22:
			f.Kind = FaultCutBoth
		case r < 42:
			f.Kind = FaultHeal
		case r < 50:
			f.Kind = FaultLossy
		case r < 64:
			f.Kind = FaultCrash
		case r < 80:
			f.Kind = FaultFreeze
			f.D = lease/8 + rng.Int64N(3*lease)
		case r < 86:
			f.Kind = FaultLeave
		default:
			f.Kind = FaultRestart
		}
		switch f.Kind {
		case FaultCrash, FaultLeave:
			if down[f.Node] {
				continue
			}
			down[f.Node] = true
			// Most crashed nodes come back after a while.
			if rng.IntN(4) != 0 {
				back := f
				back.Kind, back.At, back.Peer = FaultRestart, t+lease/4+rng.Int64N(6*lease), rng.IntN(2)
				s.Faults = append(s.Faults, f)
				f = back
				down[f.Node] = false
			}
		case FaultRestart:
			if !down[f.Node] {
				continue
			}
			down[f.Node] = false
			f.Peer = rng.IntN(2)
		}
		s.Faults = append(s.Faults, f)
	}
	sortFaults(s.Faults)
	if cfg.Extended {
		extend(&s, cfg)
	}
	if cfg.Mixed {
		mix(&s, cfg)
	}
	for range cfg.Clients {
		var ops []ClientOp
		for t := int64(0); t < int64(cfg.Duration); {
			op := ClientOp{Gap: rng.Int64N(int64(cfg.OpGap) + 1), Put: rng.IntN(100) < cfg.PutPercent, Key: rng.IntN(cfg.Keys)}
			t += op.Gap + int64(time.Millisecond)
			ops = append(ops, op)
		}
		s.Clients = append(s.Clients, ops)
	}
	return s
}

func sortFaults(fs []Fault) {
	for i := 1; i < len(fs); i++ {
		for j := i; j > 0 && fs[j].At < fs[j-1].At; j-- {
			fs[j], fs[j-1] = fs[j-1], fs[j]
		}
	}
}

// Shrink makes a failing script smaller: it drops faults, then client
// operations (halves, then quarters, ... then single ones), keeping each
// removal while a run of the smaller script still fails with the same
// kind of failure. At most budget runs are made. It returns the smallest
// failing script and its failure.
func Shrink(s Script, cfg Config, f *Failure, budget int) (Script, *Failure) {
	runs := 0
	if f.Kind != "not-linearizable" && f.Kind != "porcupine-timeout" {
		// Porcupine cannot cause this failure: a smaller run that gets
		// as far as porcupine does not fail this way anyway.
		cfg.Porcupine = time.Nanosecond
	} else {
		cfg.Porcupine = min(cfg.withDefaults().Porcupine, 2*time.Second)
	}
	// Porcupine's search on an illegal history can take long: shrinking
	// stops after a minute of wall time whatever the budget.
	stop := time.Now().Add(time.Minute)
	try := func(c Script) *Failure {
		runs++
		if time.Now().After(stop) {
			runs = budget
			return nil
		}
		r := Run(c, cfg)
		if r.Failure != nil && r.Failure.Kind == f.Kind {
			return r.Failure
		}
		return nil
	}
	for i := len(s.Faults) - 1; i >= 0 && runs < budget; i-- {
		c := s
		c.Faults = append(append([]Fault(nil), s.Faults[:i]...), s.Faults[i+1:]...)
		if g := try(c); g != nil {
			s, f = c, g
		}
	}
	for ci := range s.Clients {
		for chunk := len(s.Clients[ci]); chunk >= 1 && runs < budget; chunk /= 2 {
			for lo := 0; lo < len(s.Clients[ci]) && runs < budget; {
				hi := min(lo+chunk, len(s.Clients[ci]))
				c := s
				c.Clients = append([][]ClientOp(nil), s.Clients...)
				c.Clients[ci] = append(append([]ClientOp(nil), s.Clients[ci][:lo]...), s.Clients[ci][hi:]...)
				if g := try(c); g != nil {
					s, f = c, g
					continue // the next chunk now starts at lo
				}
				lo = hi
			}
		}
	}
	return s, f
}
