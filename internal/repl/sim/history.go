package sim

import (
	"fmt"
	"math"
	"time"

	"github.com/anishathalye/porcupine"
)

// The client history and its porcupine model: a key space where every
// put bumps one global revision, as etcd's does. A get returns the value
// and the response header revision; both must match the state at the
// read's linearization point. The model has no partition function:
// header revisions are global, so keys are not independent. Check runs
// an equivalent compact form of it (linear.go) when the history fits.

// Input is what a client asked for.
type Input struct {
	Put   bool
	Key   string
	Value string // Put only
}

// Output is what the client got back.
type Output struct {
	// Unknown: a put whose outcome the client does not know (timed out,
	// or its node crashed or stepped down); it may or may not have taken
	// effect.
	Unknown bool
	Rev     int64 // header revision (a put's: the revision it made)
	Found   bool
	Value   string
	ModRev  int64
}

// modelState is immutable: Step returns a new one.
type modelState struct {
	rev int64
	kv  map[string]modelKV
}

type modelKV struct {
	value  string
	modRev int64
}

func (s *modelState) put(key, value string) *modelState {
	n := &modelState{rev: s.rev + 1, kv: make(map[string]modelKV, len(s.kv)+1)}
	for k, v := range s.kv {
		n.kv[k] = v
	}
	n.kv[key] = modelKV{value: value, modRev: n.rev}
	return n
}

// Model is the porcupine model of the simulated store (revision 0 empty).
func Model() porcupine.Model {
	return porcupine.Model{
		Init: func() any { return &modelState{kv: map[string]modelKV{}} },
		Step: func(state, input, output any) (bool, any) {
			s, in, out := state.(*modelState), input.(Input), output.(Output)
			if in.Put {
				n := s.put(in.Key, in.Value)
				return out.Unknown || out.Rev == n.rev, n
			}
			if out.Unknown {
				return true, s
			}
			kv, ok := s.kv[in.Key]
			return out.Rev == s.rev && ok == out.Found && (!ok || kv.value == out.Value && kv.modRev == out.ModRev), s
		},
		Equal: func(a, b any) bool {
			x, y := a.(*modelState), b.(*modelState)
			if x.rev != y.rev || len(x.kv) != len(y.kv) {
				return false
			}
			for k, v := range x.kv {
				if y.kv[k] != v {
					return false
				}
			}
			return true
		},
		DescribeOperation: func(input, output any) string {
			in, out := input.(Input), output.(Output)
			switch {
			case out.Unknown:
				return fmt.Sprintf("put %s=%s ?", in.Key, in.Value)
			case in.Put:
				return fmt.Sprintf("put %s=%s @%d", in.Key, in.Value, out.Rev)
			case out.Found:
				return fmt.Sprintf("get %s -> %s (mod %d) @%d", in.Key, out.Value, out.ModRev, out.Rev)
			}
			return fmt.Sprintf("get %s -> none @%d", in.Key, out.Rev)
		},
	}
}

// maxCandidateHistories bounds the histories Check hands porcupine for
// one run (candidateHistories).
const maxCandidateHistories = 1024

// History records client operations on virtual time.
type History struct {
	ops []porcupine.Operation
}

// Add records an operation that returned (or, with out.Unknown, whose
// outcome is unknown: it stays open until the end of time).
func (h *History) Add(client int, call, ret int64, in Input, out Output) {
	if out.Unknown {
		ret = math.MaxInt64
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

// Len is the number of operations recorded.
func (h *History) Len() int { return len(h.ops) }

// Unknown is the number of operations with an unknown outcome.
func (h *History) Unknown() int {
	n := 0
	for _, op := range h.ops {
		if op.Output.(Output).Unknown {
			n++
		}
	}
	return n
}

// Check runs porcupine over the history (timeout 0: no limit), placing
// the puts of unknown outcome by search (resolve.go); a world, which
// knows its final log, uses CheckSettled instead. It returns
// "" when the history is linearizable, else the failure's kind and why (a
// timeout counts as a failure: an unfinished check proves nothing).
func (h *History) Check(timeout time.Duration) (kind, why string) {
	// The history is linearizable when one of these is (resolve.go);
	// past the limit, porcupine places the open puts itself.
	hs := candidateHistories(h.ops, maxCandidateHistories)
	if hs == nil {
		hs = [][]porcupine.Operation{h.ops}
	}
	deadline := time.Now().Add(timeout)
	timedOut := false
	for _, ops := range hs {
		left := time.Duration(0) // no limit
		if timeout > 0 {
			if left = time.Until(deadline); left <= 0 {
				timedOut = true
				break
			}
		}
		switch checkLinearizable(ops, left) {
		case porcupine.Ok:
			return "", ""
		case porcupine.Unknown:
			timedOut = true
		}
	}
	if !timedOut {
		return "not-linearizable", fmt.Sprintf("history of %d operations (%d with unknown outcome) is not linearizable", len(h.ops), h.Unknown())
	}
	return "porcupine-timeout", fmt.Sprintf("porcupine did not finish checking %d operations (%d with unknown outcome) within %v", len(h.ops), h.Unknown(), timeout)
}
