package repl

import (
	"strconv"
	"testing"
)

// BenchmarkPairWrite measures the core and the harness driver together:
// one op is one proposal on a synchronous pair, replicated, acknowledged
// and committed, plus a tick round of both nodes.
func BenchmarkPairWrite(b *testing.B) {
	h := newHarness()
	h.node("a").cfg.Bootstrap = true
	h.start(h.node("a"))
	h.start(h.node("b"))
	h.run(5*hLease, nil)
	a := h.node("a")
	if a.n.Role() != RolePrimary {
		b.Fatalf("a is %s, want primary", a.n.Role())
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := h.propose(a, "k="+strconv.Itoa(i)); err != nil {
			b.Fatal(err)
		}
		h.deliver()
		h.run(hTick, nil)
	}
	b.StopTimer()
	if c := a.n.Status().Commit; c != uint64(b.N) {
		b.Fatalf("commit %d after %d writes", c, b.N)
	}
}
