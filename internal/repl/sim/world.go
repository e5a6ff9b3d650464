package sim

import (
	"fmt"

	"math/rand/v2"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Config shapes a run. Zero fields take the defaults of withDefaults.
type Config struct {
	Nodes       int
	Lease       time.Duration
	Duration    time.Duration // faults and client operations stop here
	Settle      time.Duration // then everything heals; the pair must recover within this
	FaultEvery  time.Duration // mean gap between faults (0 in a scripted run: none drawn)
	MaxDriftPPM int64
	Clients     int
	Keys        int
	PutPercent  int
	OpGap       time.Duration // client think time, at most
	OpTimeout   time.Duration
	Net         NetConfig
	// FsyncMin and FsyncMax bound a sync's duration.
	FsyncMin, FsyncMax time.Duration
	// Porcupine bounds the linearizability check (0: no limit).
	Porcupine time.Duration
	// Trace collects a readable trace of the run (role changes, faults,
	// client operations; not heartbeats).
	Trace bool
	// Listeners adds passive parties to the network after the nodes
	// (parties.go): room for a witness or an observer.
	Listeners int
	// Extended draws the extended fault set as well (hand-overs, fence
	// command outcomes, clock rate changes; faults.go). A script drawn
	// without it is the one earlier builds drew for its seed, so the
	// regression seeds of testdata/seeds.txt replay unchanged.
	Extended bool
	// Mixed runs nodes of an older build as well, one that speaks
	// protocol versions up to ProtocolV2 only, and restarts nodes as the
	// other build (versions.go). Drawn like Extended, from a stream of
	// its own: a seed's other faults and operations do not change.
	Mixed bool
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Nodes == 0 {
		c.Nodes = 2
	}
	def(&c.Lease, time.Second)
	def(&c.Duration, 30*time.Second)
	def(&c.Settle, 20*c.Lease)
	def(&c.FaultEvery, 2*c.Lease)
	if c.MaxDriftPPM == 0 {
		c.MaxDriftPPM = 5000
	}
	if c.Clients == 0 {
		c.Clients = 3
	}
	if c.Keys == 0 {
		c.Keys = 4
	}
	if c.PutPercent == 0 {
		c.PutPercent = 50
	}
	def(&c.OpGap, c.Lease/4)
	def(&c.OpTimeout, 3*c.Lease)
	if c.Net.MaxDelay == 0 {
		c.Net = NetConfig{MinDelay: int64(50 * time.Microsecond), MaxDelay: int64(5 * time.Millisecond), Drop: 0.1, Dup: 0.05}
	}
	def(&c.FsyncMin, 100*time.Microsecond)
	def(&c.FsyncMax, 3*time.Millisecond)
	def(&c.Porcupine, 10*time.Second)
	return c
}

// Stats are the figures of one or more runs.
type Stats struct {
	Runs, Steps, Ops, Checked, Faults, Unknown, SplitBrains, Conflicts, Lost int
	// FlushedFirst counts batches a leader flushed before it sent them
	// (its pair spoke below ProtocolV3); ShownEarly entries an older
	// build's replica showed before the commit index covered them.
	FlushedFirst, ShownEarly int
}

func (s *Stats) add(o Stats) {
	s.Runs += o.Runs
	s.Steps += o.Steps
	s.Ops += o.Ops
	s.Checked += o.Checked
	s.Faults += o.Faults
	s.Unknown += o.Unknown
	s.SplitBrains += o.SplitBrains
	s.Conflicts += o.Conflicts
	s.Lost += o.Lost
	s.FlushedFirst += o.FlushedFirst
	s.ShownEarly += o.ShownEarly
}

// Result is the outcome of one run.
type Result struct {
	Stats
	Failure *Failure
	Trace   []string
	// History is every recorded client operation (porcupine's form:
	// Input, Output, Call and Return in virtual ns; ClientId the client).
	History []porcupine.Operation
	// Truth is what the settled leader's log says each put did, for a
	// run porcupine judged (settle.go); nil otherwise.
	Truth Truth
	// Checking is the wall time porcupine took to judge the history.
	Checking time.Duration
	// Roles is every role change, in order.
	Roles []RoleEvent
	// Heard is, per listener (Config.Listeners), the packets it heard
	// from each party.
	Heard [][]int
}

// RoleEvent is a node's role change at virtual time At.
type RoleEvent struct {
	At               int64
	Node             int
	From, To, Reason string
}

// client is a sequential stream of operations.
type client struct {
	id, node int // node: where its next operation goes
	ops      []ClientOp
	next     int
}

// Op is a client operation in flight.
type Op struct {
	c    *client
	in   Input
	id   uint64 // the write's ID, or the read's
	call int64
	node int
	done bool
	// leads: a read was served by a leader (not a replica).
	leads bool
}

// World is one run: the nodes, the network, the clients and the checker
// on one event queue. It owns no goroutine.
type World struct {
	cfg    Config
	script Script
	q      Queue
	rng    *rand.Rand
	net    *Network
	nodes  []*node
	// parties is everything on the network: nodes first (parties.go).
	parties   []party
	listeners []*listener
	views     []View
	clients   []*client
	check     *Checker
	hist      History
	stats     Stats
	nextID    uint64
	trace     []string
	roles     []RoleEvent
	// failover watches the surviving node after a crash of a healthy pair.
	failover struct {
		armed    bool
		survivor int
		deadline int64
	}
	lastFault int64
	// healed: the faults ended (Duration passed) and everything healed;
	// a node that stops after that, because a final hand-over begun
	// before the end completes, has its storage repaired and restarts
	// (adapter_faults.go), as an operator would per OPERATIONS.md.
	healed bool
	// apart: two nodes served as leaders apart (after a two-way
	// partition): at once, or one after the other in epochs of the same
	// term (ledTerm), so that neither epoch descends from the other. The
	// history is then not linearizable by design (each side served
	// without the other's writes), so porcupine does not judge it (the
	// checker's deferred rules do). Seed 3076581: cut both ways, the
	// primary went solo in 8/1, acknowledged a write and left; the
	// replica, told nothing, fenced it and led in 8/2 without that write,
	// never at the same instant as 8/1.
	apart bool
	// ledTerm is, per term, the node that led in it.
	ledTerm map[uint64]uint64
	// truth is the settled leader's log, when porcupine judged the run.
	truth Truth
	// checking is the wall time the porcupine check took (not a Stat:
	// Stats are a pure function of the seed).
	checking time.Duration
}

// Run runs script under cfg and returns its result.
func Run(s Script, cfg Config) Result {
	cfg = cfg.withDefaults()
	w := &World{cfg: cfg, script: s, rng: rand.New(rand.NewPCG(s.Seed, 0xd1ad)), lastFault: 0}
	w.check = NewChecker(cfg.Nodes, w.q.Now)
	w.check.BoundDrift(cfg.MaxDriftPPM)
	w.net = NewNetwork(cfg.Nodes+cfg.Listeners, cfg.Net, w.rng, &w.q, w.deliver)
	for i := range cfg.Nodes {
		ppm := int64(0)
		if i < len(s.PPM) {
			ppm = s.PPM[i]
		}
		w.nodes = append(w.nodes, newNode(w, i, ppm))
		w.views = append(w.views, View{})
	}
	w.addParties(cfg.Listeners)
	for _, n := range w.nodes {
		n.start(false)
	}
	for _, f := range s.Faults {
		w.q.At(f.At, func() { w.fault(f) })
	}
	for i, ops := range s.Clients {
		c := &client{id: i, node: i % cfg.Nodes, ops: ops}
		w.clients = append(w.clients, c)
		w.schedule(c, 2*int64(cfg.Lease))
	}
	for i, t := range s.Ops {
		c := &client{id: len(s.Clients) + i, node: t.Node % cfg.Nodes, ops: []ClientOp{t.Op}}
		w.clients = append(w.clients, c)
		w.q.At(t.At, func() { w.issue(c) })
	}
	end := int64(cfg.Duration)
	stop := func() bool { return w.check.Failed() != nil }
	if !w.q.RunUntil(end, stop) {
		w.tracef("end of faults: heal everything, restart every node")
		w.healed = true
		w.net.HealAll()
		for _, n := range w.nodes {
			n.heal()
		}
		w.afterStep()
		if !w.q.RunUntil(end+int64(cfg.Settle), stop) {
			w.settled()
		}
	}
	r := Result{Stats: w.stats, Failure: w.check.Failed(), Trace: w.trace, History: w.hist.ops, Truth: w.truth, Checking: w.checking, Roles: w.roles}
	r.Runs, r.Conflicts = 1, w.check.Conflicts
	for _, l := range w.listeners {
		r.Heard = append(r.Heard, l.heard)
	}
	for _, n := range w.nodes {
		r.Lost += n.disk.Lost
	}
	r.Unknown = w.hist.Unknown()
	return r
}

// settled runs the checks at the end of a run.
func (w *World) settled() {
	w.refreshViews()
	leaders, replicas := 0, 0
	for _, v := range w.views {
		switch {
		case v.Up && v.Leads:
			leaders++
		case v.Up && v.Role == "replica":
			replicas++
		}
	}
	if leaders != 1 || replicas != len(w.nodes)-1 {
		roles := make([]string, len(w.views))
		for i, v := range w.views {
			roles[i] = v.Role
		}
		w.check.Fail("no-recovery", "%v after everything healed for %v: roles %v", w.cfg.Settle, w.cfg.Settle, roles)
		return
	}
	w.check.Final(w.views)
	if w.check.Failed() != nil {
		return
	}
	if !w.apart && w.stats.SplitBrains == 0 && w.check.Conflicts == 0 {
		// The one leader's log settles the puts of unknown outcome
		// (settle.go).
		for i, v := range w.views {
			if v.Up && v.Leads {
				w.truth = w.nodes[i].truth()
			}
		}
		start := time.Now()
		kind, why := w.hist.CheckSettled(w.truth, w.cfg.Porcupine)
		w.checking = time.Since(start)
		if kind != "" {
			w.check.Fail(kind, "%s", why)
			return
		}
		w.stats.Checked += w.hist.Len()
	}
}

// tracef adds a line to the trace (when tracing).
func (w *World) tracef(format string, args ...any) {
	if w.cfg.Trace {
		w.trace = append(w.trace, fmt.Sprintf("%9.4fs ", float64(w.q.Now())/1e9)+fmt.Sprintf(format, args...))
	}
}

// step counts one step and checks the invariants after it.
func (w *World) step() {
	w.stats.Steps++
	w.afterStep()
}

func (w *World) afterStep() {
	w.refreshViews()
	w.check.Step(w.views)
	leaders := 0
	for _, v := range w.views {
		if v.Up && v.Leads {
			leaders++
		}
	}
	if leaders > 1 {
		w.apart = true
	}
	if !w.check.twoWay {
		return // before a two-way cut, porcupine judges every history
	}
	for _, v := range w.views {
		if !v.Up || !v.Leads {
			continue
		}
		if w.ledTerm == nil {
			w.ledTerm = make(map[uint64]uint64)
		}
		if n, ok := w.ledTerm[v.Epoch.Term]; !ok {
			w.ledTerm[v.Epoch.Term] = v.Epoch.Node
		} else if n != v.Epoch.Node {
			w.apart = true
		}
	}
}

func (w *World) refreshViews() {
	for i, n := range w.nodes {
		n.view(&w.views[i])
	}
}

// deliver hands a packet that arrived to its receiver.
func (w *World) deliver(p Packet) {
	if w.parties[p.To].receive(p) {
		w.step()
	}
}

// fault injects f.
func (w *World) fault(f Fault) {
	peerIsNode := f.Kind == FaultCut || f.Kind == FaultCutBoth
	if f.Node >= len(w.nodes) || peerIsNode && f.Peer >= len(w.nodes) {
		return
	}
	w.stats.Faults++
	w.failover.armed = false // another fault: the failover bound no longer applies
	w.lastFault = w.q.Now()
	w.tracef("fault %s", f)
	n := w.nodes[f.Node]
	switch f.Kind {
	case FaultCut:
		w.net.SetCut(f.Node, f.Peer, true)
	case FaultCutBoth:
		w.net.SetCut(f.Node, f.Peer, true)
		w.net.SetCut(f.Peer, f.Node, true)
	case FaultHeal:
		w.net.HealAll()
	case FaultLossy:
		w.net.SetLossy(true)
	case FaultCrash, FaultLeave:
		w.armFailover(f.Node)
		n.stop(f.Kind == FaultLeave)
	case FaultRestart:
		n.restart(f.Peer == 1)
	case FaultFreeze:
		n.freeze(f.D)
	case FaultHandover, FaultFence, FaultDrift:
		w.extendedFault(f)
	case FaultBuild:
		n.old = f.Peer == 1
	}
	if w.net.Isolated(0, 1) {
		w.check.TwoWayCut()
	}
	w.step()
}

// armFailover starts watching the failover bound when node gone leaves a
// healthy, settled pair: the survivor must lead within 2 leases.
func (w *World) armFailover(gone int) {
	if len(w.nodes) != 2 || !w.net.Healthy() || w.q.Now()-w.lastFault < 4*int64(w.cfg.Lease) {
		return
	}
	s := 1 - gone
	if !w.nodes[s].up() || !w.nodes[gone].up() || !w.nodes[gone].synchronousWith(w.nodes[s]) {
		return
	}
	extra, ok := w.nodes[s].failoverBound()
	if !ok {
		return // its fence command fails or is slow: no bound applies
	}
	w.failover.armed, w.failover.survivor = true, s
	w.failover.deadline = w.q.Now() + 2*int64(w.cfg.Lease) + extra
	deadline := w.failover.deadline
	w.q.At(deadline, func() {
		if !w.failover.armed || w.failover.deadline != deadline {
			return
		}
		w.failover.armed = false
		if !w.nodes[s].leads() {
			w.check.Fail("slow-failover", "node %d does not lead %v after its synchronous peer stopped (role %s)", s, time.Duration(2*int64(w.cfg.Lease)+extra), w.nodes[s].roleName())
		}
	})
}

// schedule issues c's next operation after its gap.
func (w *World) schedule(c *client, extra int64) {
	if c.next >= len(c.ops) {
		return
	}
	op := c.ops[c.next]
	w.q.After(op.Gap+extra, func() { w.issue(c) })
}

// issue sends c's next operation to its node.
func (w *World) issue(c *client) {
	if w.q.Now() >= int64(w.cfg.Duration) || c.next >= len(c.ops) {
		return
	}
	spec := c.ops[c.next]
	c.next++
	w.nextID++
	op := &Op{c: c, id: w.nextID, call: w.q.Now(), node: c.node}
	op.in = Input{Put: spec.Put, Key: fmt.Sprintf("k%d", spec.Key)}
	if spec.Put {
		op.in.Value = fmt.Sprintf("v%d", op.id)
	}
	w.stats.Ops++
	w.tracef("client %d -> node %d: %s %s %s (op %d)", c.id, op.node, map[bool]string{true: "put", false: "get"}[spec.Put], op.in.Key, op.in.Value, op.id)
	w.q.After(int64(w.cfg.OpTimeout), func() {
		if !op.done {
			w.finish(op, Output{Unknown: true}, true)
			w.step()
		}
	})
	w.nodes[op.node].submit(op)
	w.step()
}

// finish ends op: out is its result; failed (with out.Unknown) says the
// client got an error. A read that failed, and a write that surely did
// not happen, leave no trace in the history. It reports whether op was
// still open (a late result after a timeout is not the client's).
func (w *World) finish(op *Op, out Output, failed bool) bool {
	if op.done {
		return false
	}
	op.done = true
	c := op.c
	switch {
	case out.Unknown && op.in.Put:
		w.hist.Add(c.id, op.call, 0, op.in, out)
	case !failed:
		w.hist.Add(c.id, op.call, w.q.Now(), op.in, out)
		if !op.in.Put {
			w.check.Read(op.node, op.leads, op.in.Key, op.call, out)
		}
	}
	if failed {
		c.node = (c.node + 1) % len(w.nodes) // fail over to the next node
	}
	w.tracef("client %d <- node %d: op %d: %+v failed=%v", c.id, op.node, op.id, out, failed)
	w.schedule(c, 0)
	return true
}

// Describe summarizes a result for a report.
func (r *Result) Describe(s Script) string {
	var b strings.Builder
	if r.Failure != nil {
		fmt.Fprintf(&b, "FAILED: %v\n", r.Failure)
	}
	b.WriteString(s.String())
	for _, l := range r.Trace {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}
