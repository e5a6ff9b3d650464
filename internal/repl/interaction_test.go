package repl

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestInteraction runs the scenario scripts of testdata/ (one pair each)
// through the harness. Commands:
//
//	config a bootstrap preferred fence=fail manual minproto=2 build=1..2
//	                      node options, before start (build: the protocol
//	                      versions the node's build speaks; minproto: its
//	                      --min-protocol-version)
//	start a [b]           start (or restart after a crash) from the node's disk,
//	                      or start running a node that is opening
//	open a                make a's core from its disk without running it
//	                      (a slow open of the data file)
//	run 3s [a]            move the clock; every live node (or only a) ticks
//	crash b [lose=1] [nocommit]
//	                      stop b; messages to and from it are lost (and
//	                      its disk loses its last entry: not yet synced;
//	                      nocommit: it kept no commit bound, as a data dir
//	                      of an older build)
//	restart b             crash b if it runs, then start it again
//	cut a->b | a<->b      drop messages in that direction (or both)
//	heal                  drop every cut and every drop
//	drop a->b catchup     lose messages of that kind on that link
//	hold a->b [catchup]   keep back messages (of that kind) on that link,
//	                      even across crashes, ...
//	release a->b [reverse] ... and deliver them now (reverse: the newest
//	                      first, as a network that reorders may)
//	freeze a 2s           a neither ticks nor takes messages for 2 s
//	unsynced a            a's entries are written but not synced (its
//	                      messages go out; a crash loses them) ...
//	sync a                ... until this syncs and reports them
//	propose a k=v         propose an entry on a (prints an error if refused)
//	read a 7              register linearizable read 7 on a
//	read a 7 grant        serve it under a's published read grant if
//	                      that covers now, else register it
//	grant a               the read grant a's driver publishes now
//	fence a               the fence command a runs finishes
//	move-leader a [final] a hands its role over (final: its storage
//	                      failed, and it stops once the hand-over is sent)
//	leave b               b stops on purpose (then crashes)
//	resolve b             the operator accepts b's split brain
//	stray a ack 5         a receives an ack of index 5 (or a snapshot
//	                      chunk, catchup answer) from a party that is
//	                      not its peer; options from=b, to=7,
//	                      version=9, range=3..4 (a heartbeat's flags)
//	protocol              each node's protocol versions (Node.Protocol) and
//	                      whether it would send a batch before its flush
//	status                one line per node
//	log a                 the epochs of a's log
//	trace on|off          print every delivered message
//
// Role changes, read states, counters and effects are printed as they
// happen.
func TestInteraction(t *testing.T) {
	// Every testdata/*.txt is a scenario (README.md beside them is the
	// coverage table, not a scenario).
	paths, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no scenarios in testdata: %v", err)
	}
	for _, path := range paths {
		t.Run(strings.TrimSuffix(filepath.Base(path), ".txt"), func(t *testing.T) { runScenario(t, path) })
	}
}

// runScenario runs one scenario script on a fresh harness.
func runScenario(t *testing.T, path string) {
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
				k, v, _ := strings.Cut(a.String(), "=")
				switch k {
				case "build":
					x.cfg.Build = parseRange(t, d, v)
					continue
				case "minproto":
					x.cfg.MinProtocol = parseRange(t, d, v).Min
					continue
				}
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
		x := h.node(arg(0))
		h.crash(x)
		for i := 1; i < len(d.CmdArgs); i++ {
			if arg(i) == "nocommit" {
				x.commit = 0 // a data dir written by a build that kept no bound
				continue
			}
			n, err := strconv.Atoi(strings.TrimPrefix(arg(i), "lose="))
			if err != nil || n > len(x.log) {
				t.Fatalf("%s: crash %s: bad %q", d.Pos, x.name, arg(i))
			}
			h.lose(x, n)
		}
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
		held := h.held[link]
		if len(d.CmdArgs) > 1 {
			if arg(1) != "reverse" {
				t.Fatalf("%s: unknown option %s", d.Pos, arg(1))
			}
			slices.Reverse(held)
		}
		for _, m := range held {
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
	case "unsynced":
		h.node(arg(0)).holdSync = true
	case "sync":
		h.sync(h.node(arg(0)))
		h.deliver()
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
		if len(d.CmdArgs) > 2 && arg(2) == "grant" {
			// As the server's request goroutine: under the published
			// grant at once, else through ReadIndex.
			if x.grant.Covers(h.now) {
				h.printf("%s: read %d served under the grant at index %d", x.name, id, x.grant.Index)
				break
			}
			h.printf("%s: read %d not covered by a grant", x.name, id)
		}
		x.n.ReadIndex(id, h.now)
		h.process(x)
		h.deliver()
	case "fence":
		h.runFence(h.node(arg(0)))
		h.deliver()
	case "move-leader":
		x := h.node(arg(0))
		final := len(d.CmdArgs) > 1 && arg(1) == "final"
		if err := x.n.Handover(final); err != nil {
			h.printf("%s: move-leader refused: %v", x.name, err)
		}
		h.process(x)
		if final {
			x.n = nil // its storage failed: it stops once the hand-over is sent
		}
		h.deliver()
	case "leave":
		x := h.node(arg(0))
		x.n.Leave()
		h.process(x)
		x.n = nil // stopped; what it sent on the way out still arrives
		h.deliver()
	case "resolve":
		x := h.node(arg(0))
		x.accepted = true
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
		m := Message{Kind: k, From: 99, To: x.id, Index: idx, Term: x.n.peer.Snap.Req, Received: h.now}
		for _, a := range d.CmdArgs[3:] {
			h.strayOption(t, d, &m, a.String())
		}
		x.n.Step(m)
		h.process(x)
		h.deliver()
	case "protocol":
		for _, x := range h.nodes {
			if x.n != nil {
				p := x.n.Protocol()
				h.printf("%s: own=%v peer=%v version=%d send=%d heartbeat=%d refused=%q sendfirst=%v", x.name, p.Own, p.Peer, p.Version, p.Send, p.Heartbeat, p.Refused, x.n.SendsBeforeFlush())
			}
		}
	case "grant":
		x := h.node(arg(0))
		if x.grant.Covers(h.now) {
			h.printf("%s: grant index=%d for %s", x.name, x.grant.Index, time.Duration(x.grant.Until-h.now))
		} else {
			h.printf("%s: no grant", x.name)
		}
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

// strayOption sets one option of a stray message: its sender (a node's
// name), addressee, version, or advertised range of protocol versions.
func (h *harness) strayOption(t *testing.T, d *datadriven.TestData, m *Message, opt string) {
	k, v, _ := strings.Cut(opt, "=")
	num := func(s string) uint64 {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s: %s: %v", d.Pos, opt, err)
		}
		return n
	}
	switch k {
	case "from":
		m.From = h.node(v).id
	case "to":
		m.To = num(v)
	case "version":
		m.Version = uint16(num(v))
	case "range":
		m.Flags = parseRange(t, d, v).Flags()
	default:
		t.Fatalf("%s: unknown option %s", d.Pos, opt)
	}
}

// parseRange parses a range of protocol versions: lo..hi, or one version.
func parseRange(t *testing.T, d *datadriven.TestData, v string) ProtocolRange {
	lo, hi, ok := strings.Cut(v, "..")
	if !ok {
		hi = lo
	}
	a, err1 := strconv.ParseUint(lo, 10, 16)
	b, err2 := strconv.ParseUint(hi, 10, 16)
	if err1 != nil || err2 != nil {
		t.Fatalf("%s: bad range of versions %q", d.Pos, v)
	}
	return ProtocolRange{Min: uint16(a), Max: uint16(b)}
}

// flushFirst proposes es on x as the driver does when x's pair speaks
// below ProtocolV3 (Node.SendsBeforeFlush false): the batch is written at
// the position the core will give it and flushed first, and only then
// proposed, reported Persisted and sent, so that a replica of an older
// build, which shows what it persists, never holds what the leader may
// still lose. Under "unsynced" the flush waits for "sync": nothing of the
// batch is sent meanwhile, and a crash loses it.
func (h *harness) flushFirst(x *hnode, es []Entry) error {
	if !x.n.Role().Leads() {
		return ErrNotLeader
	}
	if x.n.HandingOver() {
		return ErrHandingOver
	}
	next, epoch, solo := x.n.Next()
	for i := range es {
		es[i].Index, es[i].Epoch, es[i].Solo = next+uint64(len(x.flushing)+i), epoch, solo
		es[i].Rev += int64(len(x.flushing))
	}
	x.flushing = append(x.flushing, es...)
	if x.holdSync {
		h.printf("%s: flushing entry %d before sending it", x.name, es[len(es)-1].Index)
		return nil
	}
	h.flushed(x)
	return nil
}

// flushed ends x's flush of its batch: durable now, it is proposed,
// reported Persisted, and sent.
func (h *harness) flushed(x *hnode) {
	es := x.flushing
	x.flushing = nil
	x.log = append(x.log, es...)
	last := es[len(es)-1]
	x.flushed = last.Index
	if err := x.n.Propose(es); err != nil {
		h.violations = append(h.violations, fmt.Sprintf("%s: the core refused the batch it flushed: %v", x.name, err))
		return
	}
	x.n.Persisted(last.Index, last.Rev)
	x.n.Applied(last.Index)
	h.process(x)
}
