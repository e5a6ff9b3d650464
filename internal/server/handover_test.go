package server_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// load writes unique keys through clients (two writers each) until
// stopped. Each writer reads its key back linearizably through the same
// node and checks that the revisions it sees never decrease.
type load struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	acked    map[string]string
	failures map[string]int // error text -> count
	backward []string
	stale    []string
	lastAck  time.Time
	maxGap   time.Duration // longest time without an acknowledged write
}

func startLoad(clis ...*clientv3.Client) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel, acked: map[string]string{}, failures: map[string]int{}, lastAck: time.Now()}
	for i, cli := range clis {
		for w := 0; w < 2; w++ {
			l.wg.Add(1)
			go l.writer(ctx, cli, fmt.Sprintf("%d%d", i, w))
		}
	}
	return l
}

func (l *load) writer(ctx context.Context, cli *clientv3.Client, id string) {
	defer l.wg.Done()
	var last int64
	for seq := 0; ctx.Err() == nil; seq++ {
		key, val := fmt.Sprintf("load/%s/%06d", id, seq), fmt.Sprint(seq)
		octx, cancel := context.WithTimeout(ctx, 20*testLease)
		resp, err := cli.Put(octx, key, val)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				l.mu.Lock()
				l.failures[id+" "+err.Error()]++
				l.mu.Unlock()
			}
			continue
		}
		l.mu.Lock()
		now := time.Now()
		if gap := now.Sub(l.lastAck); gap > l.maxGap {
			l.maxGap = gap
		}
		l.lastAck = now
		l.acked[key] = val
		if resp.Header.Revision <= last {
			l.backward = append(l.backward, fmt.Sprintf("%s: put at %d after %d", key, resp.Header.Revision, last))
		}
		l.mu.Unlock()
		last = resp.Header.Revision
		octx, cancel = context.WithTimeout(ctx, 20*testLease)
		g, err := cli.Get(octx, key)
		cancel()
		if err != nil {
			continue
		}
		l.mu.Lock()
		if len(g.Kvs) == 0 || string(g.Kvs[0].Value) != val {
			l.stale = append(l.stale, key)
		}
		if g.Header.Revision < last {
			l.backward = append(l.backward, fmt.Sprintf("%s: read at %d after %d", key, g.Header.Revision, last))
		}
		l.mu.Unlock()
		last = g.Header.Revision
	}
}

func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitAcks waits until n more writes are acknowledged.
//
// It fails only when writes stall: when no new write is acknowledged for
// 40 leases. A deadline on all n would measure throughput instead, which
// on a loaded machine under -race says nothing about the protocol.
func (l *load) waitAcks(t *testing.T, n int) {
	t.Helper()
	want := l.count() + n
	last, progress := l.count(), time.Now()
	for l.count() < want {
		if c := l.count(); c != last {
			last, progress = c, time.Now()
		}
		if time.Since(progress) > 40*testLease {
			t.Fatalf("writes stalled: %d of %d acknowledged, none in the last %v", l.count(), want, 40*testLease)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// verify checks the clients' observations, and that every acknowledged
// write is on each node with its value.
func (l *load) verify(t *testing.T, nodes ...*node) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.backward) > 0 {
		t.Errorf("revisions ran backwards: %v", l.backward)
	}
	if len(l.stale) > 0 {
		t.Errorf("linearizable reads missed acknowledged writes: %v", l.stale)
	}
	for _, n := range nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
		resp, err := n.cli.Get(ctx, "load/", clientv3.WithPrefix())
		cancel()
		if err != nil {
			t.Fatalf("%s: reading back: %v", n.cfg.Name, err)
		}
		have := map[string]string{}
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = string(kv.Value)
		}
		lost := 0
		for k, v := range l.acked {
			if have[k] != v {
				lost++
			}
		}
		if lost > 0 {
			t.Errorf("%s: %d of %d acknowledged writes lost", n.cfg.Name, lost, len(l.acked))
		}
	}
	t.Logf("%d writes acknowledged; failures %v; longest time without an acknowledgement %s", len(l.acked), l.failures, l.maxGap)
}

func counter(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func leaderOf(t *testing.T, n *node) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := n.cli.Status(ctx, n.cli.Endpoints()[0])
	if err != nil {
		t.Fatalf("%s: status: %v", n.cfg.Name, err)
	}
	return st.Leader
}

// moveLeader asks from to hand the role to target, and returns how long
// the call took.
func moveLeader(t *testing.T, from *node, target uint64) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	start := time.Now()
	if _, err := from.cli.MoveLeader(ctx, target); err != nil {
		t.Fatalf("move-leader from %s to %x: %v", from.cfg.Name, target, err)
	}
	return time.Since(start)
}

// newPair starts an in-memory pair: a primary (member 1) and its replica
// (member 2).
func newPair(t *testing.T) (a, b *node) {
	return startPair(t, transport.NewMemNet(), t.TempDir(), t.TempDir())
}

// waitLease waits until n knows a valid primary (a replica holds its read
// lease).
func waitLease(t *testing.T, n *node) {
	t.Helper()
	deadline := time.Now().Add(20 * testLease)
	for !n.srv.HasLeader() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no valid primary", n.cfg.Name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The role moves to the replica and back while both nodes take writes:
// writes pause but none fails (the old primary's queued writes and the
// replica's forwarded ones go to the new primary), no acknowledged write
// is lost, no client sees a revision go back, and neither move is a
// failover (no promotion after a lease expired).
func TestPairMoveLeaderUnderLoad(t *testing.T) {
	for _, loop := range pairLoops {
		t.Run(loop.name, func(t *testing.T) {
			a, b := startPairWith(t, transport.NewMemNet(), t.TempDir(), t.TempDir(), loop.edit)
			testPairMoveLeaderUnderLoad(t, a, b)
		})
	}
}

func testPairMoveLeaderUnderLoad(t *testing.T, a, b *node) {
	waitLease(t, b)
	l := startLoad(a.cli, b.cli)
	defer l.stop()
	l.waitAcks(t, 100)

	for _, step := range []struct {
		from, to *node
	}{{a, b}, {b, a}} {
		took := moveLeader(t, step.from, step.to.cfg.MemberID)
		t.Logf("move-leader %s -> %s answered in %s", step.from.cfg.Name, step.to.cfg.Name, took)
		if r := step.to.srv.Role(); r != repl.RolePrimary {
			t.Fatalf("move-leader answered, but %s is %s, not primary", step.to.cfg.Name, r)
		}
		waitRole(t, step.from, repl.RoleReplica)
		l.waitAcks(t, 100)
		for _, n := range []*node{a, b} {
			if got := leaderOf(t, n); got != step.to.cfg.MemberID {
				t.Fatalf("%s reports leader %x, want %x", n.cfg.Name, got, step.to.cfg.MemberID)
			}
		}
	}
	l.stop()
	l.verify(t, a, b)
	if len(l.failures) > 0 {
		t.Errorf("writes failed across the hand-overs: %v", l.failures)
	}
	rev := put(t, a.cli, "after", "1")
	if hashAt(t, a, rev) != hashAt(t, b, rev) {
		t.Fatal("HashKV differs after the hand-overs")
	}
	for _, n := range []*node{a, b} {
		m := n.srv.Config().Metrics
		if f := counter(t, m.Failovers) + counter(t, m.FalseFailovers); f != 0 {
			t.Fatalf("%s counted %v failovers: the role moved by lease expiry, not hand-over", n.cfg.Name, f)
		}
	}
}

// etcd's answers: a non-leader says "not leader", an unknown target is a
// bad transferee, the leader itself is a no-op; a primary without a
// synchronous replica cannot hand over, and keeps leading.
func TestPairMoveLeaderRefused(t *testing.T) {
	a, b := newPair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()

	if _, err := b.cli.MoveLeader(ctx, 1); !errors.Is(rpctypes.Error(err), rpctypes.ErrNotLeader) {
		t.Fatalf("move-leader on the replica: %v, want %v", err, rpctypes.ErrNotLeader)
	}
	if _, err := a.cli.MoveLeader(ctx, 0xbad); !errors.Is(rpctypes.Error(err), rpctypes.ErrBadLeaderTransferee) {
		t.Fatalf("move-leader to an unknown member: %v, want %v", err, rpctypes.ErrBadLeaderTransferee)
	}
	if _, err := a.cli.MoveLeader(ctx, 1); err != nil {
		t.Fatalf("move-leader to the leader itself: %v", err)
	}
	if r := a.srv.Role(); r != repl.RolePrimary {
		t.Fatalf("after a no-op move-leader the leader is %s", r)
	}

	b.stop()
	waitRole(t, a, repl.RoleSolo)
	if _, err := a.cli.MoveLeader(ctx, 2); err == nil {
		t.Fatal("a solo node handed its role to a dead peer")
	}
	if r := a.srv.Role(); r != repl.RoleSolo {
		t.Fatalf("after a refused move-leader the leader is %s", r)
	}
	put(t, a.cli, "still", "writable")

	single := startNode(t, testConfig(t))
	_, id := single.srv.IDs()
	if _, err := single.cli.MoveLeader(ctx, id); err != nil {
		t.Fatalf("single node, move-leader to itself: %v", err)
	}
	if _, err := single.cli.MoveLeader(ctx, id+1); !errors.Is(rpctypes.Error(err), rpctypes.ErrBadLeaderTransferee) {
		t.Fatalf("single node, move-leader elsewhere: %v", err)
	}
}

// A primary whose disk can no longer persist hands the role over: the
// replica leads at once (not after the primary's lease: no failover is
// counted), every acknowledged write is there, and the failed node's
// clients get errors, never a success.
func TestPairPrimaryStorageFailureHandsOver(t *testing.T) {
	a, b := newPair(t)
	waitLease(t, b)
	l := startLoad(a.cli, b.cli)
	defer l.stop()
	l.waitAcks(t, 100)

	server.InjectStorageFault(a.srv, func() error { return syscall.ENOSPC })
	waitRole(t, b, repl.RoleSolo)
	l.waitAcks(t, 50) // writes through b go on
	l.stop()

	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	if _, err := a.cli.Put(ctx, "on-failed", "x"); err == nil {
		t.Fatal("the node that cannot persist acknowledged a write")
	}
	if _, err := a.cli.Get(ctx, "load/"); err == nil {
		t.Fatal("the node that cannot persist served a linearizable read")
	}
	l.verify(t, b)
	if f := counter(t, b.srv.Config().Metrics.Failovers); f != 0 {
		t.Fatalf("the replica took over by lease expiry (%v failovers), not by hand-over", f)
	}
}

// A replica whose disk can no longer persist stops acknowledging: the
// primary goes solo after --ack-timeout and acknowledges the writes that
// waited; the replica refuses writes and linearizable reads.
func TestPairReplicaStorageFailureEjected(t *testing.T) {
	a, b := newPair(t)
	put(t, a.cli, "before", "1")

	server.InjectStorageFault(b.srv, func() error { return syscall.ENOSPC })
	put(t, a.cli, "during", "2") // acknowledged once the replica is ejected
	if r := a.srv.Role(); r != repl.RoleSolo {
		t.Fatalf("primary is %s after acknowledging without its replica", r)
	}
	if got := counter(t, a.srv.Config().Metrics.SoloEntered); got != 1 {
		t.Fatalf("solo entered %v times, want 1", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	if _, err := b.cli.Put(ctx, "on-failed", "x"); err == nil {
		t.Fatal("the replica that cannot persist acknowledged a write")
	}
	if _, err := b.cli.Get(ctx, "during"); err == nil {
		t.Fatal("the replica that cannot persist served a linearizable read")
	}
	if v, _ := get(t, a.cli, "before"); v != "1" {
		t.Fatalf("acknowledged write lost: %q", v)
	}
}

// NOSPACE is a replicated alarm: raised by the primary's quota, both nodes
// refuse puts, txns with a put and lease grants, and still allow deletes
// and compaction. Disarming it through the replica clears it for good.
func TestPairNoSpaceAlarmReplicated(t *testing.T) {
	net := transport.NewMemNet()
	cfgA := pairConfig(net, t.TempDir(), 1, true)
	cfgA.QuotaBackendBytes = 1 << 20
	a := startNode(t, cfgA)
	dirB := t.TempDir()
	b := pairNode(t, net, dirB, 2, false)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	ctx, cancel := context.WithTimeout(context.Background(), 60*testLease)
	defer cancel()

	big := string(make([]byte, 64<<10))
	var err error
	for i := 0; err == nil; i++ {
		if i > 100 {
			t.Fatal("the quota never raised NOSPACE")
		}
		_, err = a.cli.Put(ctx, fmt.Sprintf("big/%03d", i), big)
	}
	if !errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
		t.Fatalf("put past the quota: %v, want %v", err, rpctypes.ErrNoSpace)
	}
	for _, n := range []*node{a, b} {
		deadline := time.Now().Add(20 * testLease)
		for len(alarms(t, n)) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: NOSPACE alarm not raised", n.cfg.Name)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := n.cli.Put(ctx, "k", "v"); !errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
			t.Fatalf("%s: put under NOSPACE: %v", n.cfg.Name, err)
		}
		_, err := n.cli.Txn(ctx).Then(clientv3.OpPut("k", "v")).Commit()
		if !errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
			t.Fatalf("%s: txn with a put under NOSPACE: %v", n.cfg.Name, err)
		}
		if _, err := n.cli.Grant(ctx, 10); !errors.Is(rpctypes.Error(err), rpctypes.ErrNoSpace) {
			t.Fatalf("%s: lease grant under NOSPACE: %v", n.cfg.Name, err)
		}
	}
	// The replica forwards writes only while it holds its primary's read
	// lease (HasLeader). The solo leader granted none, and the primary's
	// first granting heartbeat may still be a tick (Lease/8) away when the
	// quota is already full, so the replica refuses with "no leader". The
	// lease is this check's precondition, not what it tests: wait for it.
	waitLease(t, b)
	if _, err := b.cli.Delete(ctx, "big/000"); err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	resp, err := b.cli.Delete(ctx, "big/001")
	if err != nil {
		t.Fatalf("delete under NOSPACE: %v", err)
	}
	if _, err := b.cli.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatalf("compact under NOSPACE: %v", err)
	}

	// Disarm through the replica, as etcdctl alarm disarm does; the quota
	// only exists on a, so b's writes pass again.
	if _, err := b.cli.AlarmDisarm(ctx, &clientv3.AlarmMember{}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []*node{a, b} {
		if got := alarms(t, n); len(got) != 0 {
			t.Fatalf("%s: alarms after disarm: %v", n.cfg.Name, got)
		}
	}
	put(t, b.cli, "k", "after-disarm")
	b.stop()
	b = pairNode(t, net, dirB, 2, false)
	waitRole(t, b, repl.RoleReplica)
	if got := alarms(t, b); len(got) != 0 {
		t.Fatalf("disarmed alarm back after a restart: %v", got)
	}
}

func alarms(t *testing.T, n *node) []*pb.AlarmMember {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := n.cli.AlarmList(ctx)
	if err != nil {
		t.Fatalf("%s: alarm list: %v", n.cfg.Name, err)
	}
	return resp.Alarms
}

// startPairLoggingPrimary starts a pair on net, member 1 bootstrapping
// with its log captured in the returned buffer, member 2 as a plain
// member. It does not wait for their roles.
func startPairLoggingPrimary(t *testing.T, net *transport.MemNet) (a, b *node, logs *logBuffer) {
	t.Helper()
	logs = &logBuffer{}
	cfgA := pairConfig(net, t.TempDir(), 1, true)
	cfgA.Logger = slog.New(slog.NewTextHandler(logs, nil))
	a = startNode(t, cfgA)
	b = pairNode(t, net, t.TempDir(), 2, false)
	return a, b, logs
}

// logBuffer collects a node's log lines (safe for the node's goroutines).
type logBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// String is everything logged so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// roleChange waits until the node has logged a change of role from -> to
// and returns that line. The node publishes a new role before it logs the
// change, so a test that saw the role must still wait for the line.
func (b *logBuffer) roleChange(t *testing.T, from, to repl.Role) string {
	t.Helper()
	want := fmt.Sprintf(`msg="role change" from=%s to=%s `, from, to)
	deadline := time.Now().Add(20 * testLease)
	for {
		b.mu.Lock()
		text := string(b.buf)
		b.mu.Unlock()
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, want) {
				return line
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no role change from %s to %s logged", from, to)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A replica stopped on purpose tells its primary, which leads alone at
// once (rather than after the replica's silence and read lease: a stall of
// writes on every rolling restart). A message of that kind for an older
// epoch changes nothing.
func TestPairReplicaLeaving(t *testing.T) {
	net := transport.NewMemNet()
	a, b, logs := startPairLoggingPrimary(t, net)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	put(t, a.cli, "k", "v")

	// A stale leaving message (an epoch the pair no longer runs in), as
	// the replica would have sent it.
	hbs := heartbeatLog(t, net, 1)
	err := net.Inject(0xd1ad, 2, &transport.Message{Class: transport.Control, Kind: repl.KindLeaving, Term: 1})
	if err != nil {
		t.Fatal(err)
	}
	hbs.holds(t, repl.RolePrimary, 2*testLease)
	if a.srv.Role() != repl.RolePrimary {
		t.Fatalf("a leaving message of an old epoch made the primary %s", a.srv.Role())
	}

	waitLease(t, b) // synchronous again if a loaded machine made it solo
	b.stop()
	if line := logs.roleChange(t, repl.RolePrimary, repl.RoleSolo); !strings.Contains(line, `why="the replica is stopping"`) {
		t.Fatalf("the primary went solo without the replica's leaving message (it waited out the lease): %s", line)
	}
	put(t, a.cli, "k", "alone")
}

// A planned stop of the primary while its replica stops too (both nodes
// of a pair stopped at once, as a Ctrl-C of scripts/run.sh does): the
// replica leaves without taking the hand-over, and its leaving message
// answers the hand-over. The primary's StepDown then finds nothing to
// hand over to, as for a primary alone, instead of waiting a lease for
// the silent replica and failing.
func TestPairStepDownWhileReplicaLeaves(t *testing.T) {
	net := transport.NewMemNet()
	a, b, logs := startPairLoggingPrimary(t, net)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitLease(t, b)
	put(t, a.cli, "k", "v")

	net.BlockClass(1, 2, transport.Control, true) // the hand-over never reaches b
	ctx, cancel := context.WithTimeout(context.Background(), 20*testLease)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.srv.StepDown(ctx) }()
	logs.roleChange(t, repl.RolePrimary, repl.RoleWaiting) // sent: a gave its role up
	b.stop()
	if err := <-done; err != nil {
		t.Fatalf("StepDown while the replica left: %v (want nil: nothing to hand over to)", err)
	}
	out := logs.String()
	if !strings.Contains(out, "hand-over ended: the replica is stopping") {
		t.Errorf("no log line saying the hand-over ended on the replica's stop:\n%s", out)
	}
	if strings.Contains(out, "hand-over failed") {
		t.Errorf("the replica's planned stop was logged as a failed hand-over:\n%s", out)
	}
}
