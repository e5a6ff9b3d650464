package repl

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestInteraction runs the scenario scripts of testdata/ (one pair each)
// through the harness. Commands:
//
//	config a bootstrap preferred fence=fail manual  node options, before start
//	start a [b]           start (or restart after a crash) from the node's disk,
//	                      or start running a node that is opening
//	open a                make a's core from its disk without running it
//	                      (a slow open of the data file)
//	run 3s [a]            move the clock; every live node (or only a) ticks
//	crash b               stop b; messages to and from it are lost
//	restart b             crash b if it runs, then start it again
//	cut a->b | a<->b      drop messages in that direction (or both)
//	heal                  drop every cut and every drop
//	drop a->b catchup     lose messages of that kind on that link
//	hold a->b [catchup]   keep back messages (of that kind) on that link,
//	                      even across crashes, ...
//	release a->b          ... and deliver them now
//	freeze a 2s           a neither ticks nor takes messages for 2 s
//	propose a k=v         propose an entry on a (prints an error if refused)
//	read a 7              register linearizable read 7 on a
//	fence a               the fence command a runs finishes
//	move-leader a         a hands its role over
//	leave b               b stops on purpose (then crashes)
//	resolve b             the operator accepts b's split brain
//	stray a ack 5         a receives an ack of index 5 (or a snapshot
//	                      chunk, catchup answer) from a party that is
//	                      not its peer
//	status                one line per node
//	log a                 the epochs of a's log
//	trace on|off          print every delivered message
//
// Role changes, read states, counters and effects are printed as they
// happen.
func TestInteraction(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		h := newHarness()
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			h.out.Reset()
			h.command(t, d)
			for _, v := range h.violations {
				t.Errorf("%s: invariant violated: %s", d.Pos, v)
			}
			h.violations = nil
			return h.out.String()
		})
	})
}

func (h *harness) command(t *testing.T, d *datadriven.TestData) {
	arg := func(i int) string {
		if i >= len(d.CmdArgs) {
			t.Fatalf("%s: missing argument %d", d.Pos, i+1)
		}
		return d.CmdArgs[i].String()
	}
	dur := func(s string) time.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return v
	}
	switch d.Cmd {
	case "config":
		x := h.node(arg(0))
		for _, a := range d.CmdArgs[1:] {
			switch a.String() {
			case "bootstrap":
				x.cfg.Bootstrap = true
			case "preferred":
				x.cfg.Preferred = true
			case "fence":
				x.cfg.Fence = true
			case "fence=fail":
				x.cfg.Fence, x.fenceErr = true, errors.New("fence failed")
			case "manual":
				x.cfg.ManualSplitBrain = true
			default:
				t.Fatalf("%s: unknown option %s", d.Pos, a)
			}
		}
	case "start":
		for _, a := range d.CmdArgs {
			h.start(h.node(a.String()))
		}
		h.deliver()
	case "run":
		var only *hnode
		if len(d.CmdArgs) > 1 {
			only = h.node(arg(1))
		}
		h.run(dur(arg(0)), only)
	case "open":
		h.open(h.node(arg(0)))
	case "crash":
		h.crash(h.node(arg(0)))
	case "restart":
		x := h.node(arg(0))
		h.crash(x)
		h.start(x)
		h.deliver()
	case "cut":
		from, to, both := parseLink(arg(0))
		h.cut[[2]string{from, to}] = true
		if both {
			h.cut[[2]string{to, from}] = true
		}
	case "heal":
		h.cut = map[[2]string]bool{}
		h.drop = map[[2]string]map[uint16]bool{}
	case "drop":
		from, to, _ := parseLink(arg(0))
		k, ok := kindByName(arg(1))
		if !ok {
			t.Fatalf("%s: unknown kind %s", d.Pos, arg(1))
		}
		link := [2]string{from, to}
		if h.drop[link] == nil {
			h.drop[link] = map[uint16]bool{}
		}
		h.drop[link][k] = true
	case "hold":
		from, to, _ := parseLink(arg(0))
		link := [2]string{from, to}
		h.held[link] = nil
		if len(d.CmdArgs) > 1 {
			k, ok := kindByName(arg(1))
			if !ok {
				t.Fatalf("%s: unknown kind %s", d.Pos, arg(1))
			}
			h.holdKind[link] = k
		}
	case "release":
		from, to, _ := parseLink(arg(0))
		link := [2]string{from, to}
		for _, m := range h.held[link] {
			if m.to.n != nil {
				h.inflight = append(h.inflight, m)
			}
		}
		delete(h.held, link)
		delete(h.holdKind, link)
		h.deliver()
	case "freeze":
		x := h.node(arg(0))
		x.frozenUntil = h.now + int64(dur(arg(1)))
	case "propose":
		x := h.node(arg(0))
		if err := h.propose(x, arg(1)); err != nil {
			h.printf("%s: proposal refused: %v", x.name, err)
		}
		h.deliver()
	case "read":
		x := h.node(arg(0))
		id, err := strconv.ParseUint(arg(1), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		x.n.ReadIndex(id)
		h.process(x)
		h.deliver()
	case "fence":
		h.runFence(h.node(arg(0)))
		h.deliver()
	case "move-leader":
		x := h.node(arg(0))
		if err := x.n.Handover(false); err != nil {
			h.printf("%s: move-leader refused: %v", x.name, err)
		}
		h.process(x)
		h.deliver()
	case "leave":
		x := h.node(arg(0))
		x.n.Leave()
		h.process(x)
		x.n = nil // stopped; what it sent on the way out still arrives
		h.deliver()
	case "resolve":
		x := h.node(arg(0))
		x.n.Resolve()
		h.process(x)
	case "stray":
		x := h.node(arg(0))
		k, ok := kindByName(arg(1))
		if !ok {
			t.Fatalf("%s: unknown kind %s", d.Pos, arg(1))
		}
		idx, err := strconv.ParseUint(arg(2), 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		x.n.Step(Message{Kind: k, From: 99, To: x.id, Index: idx, Term: x.n.peer.Snap.Req, Received: h.now})
		h.process(x)
		h.deliver()
	case "status":
		h.status()
	case "log":
		x := h.node(arg(0))
		var b strings.Builder
		for _, r := range x.epochs {
			b.WriteString(" " + r.Epoch.String() + "@" + strconv.FormatUint(r.Start, 10))
			if r.Solo {
				b.WriteString("(solo)")
			}
		}
		h.printf("%s: %d entries, epochs%s", x.name, len(x.log), b.String())
	case "trace":
		h.trace = arg(0) == "on"
	default:
		t.Fatalf("%s: unknown command %s", d.Pos, d.Cmd)
	}
}

// parseLink parses "a->b" or "a<->b".
func parseLink(s string) (from, to string, both bool) {
	if f, t, ok := strings.Cut(s, "<->"); ok {
		return f, t, true
	}
	f, t, _ := strings.Cut(s, "->")
	return f, t, false
}
