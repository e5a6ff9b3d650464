package upgrade

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// within bounds every wait of the test (a loaded CI machine included).
const within = 30 * time.Second

// Protocol versions the two builds speak (internal/repl): the current
// one up to 4, the next-version one up to 5.
const (
	curMax  = 4
	nextMax = 5
)

func TestRollingUpgradeAndRollback(t *testing.T) {
	cur := testutil.BuildDyad(t)
	nb := &testutil.Builder{Tags: []string{"dyad_protocol_next"}, EnvBin: "DYAD_NEXT_BIN"}
	t.Cleanup(nb.Cleanup)
	next := nb.Build(t)

	p, leader := rollingUpgrade(t, cur, next, skew{old: curMax, mixed: curMax, upgraded: nextMax})
	replica := leader.Other()

	// A next-version node that speaks nothing below 5 is refused by the
	// current build (and refuses it): both count it, status shows it,
	// and the primary, which saw its replica stop, stays solo.
	mismatch := metric(t, p, leader, "dyad_peer_protocol_mismatch_total")
	if err := p.Proc(replica).Term(); err != nil {
		t.Fatal(err)
	}
	p.Bin = next
	p.Start(replica, "--min-protocol-version", strconv.Itoa(nextMax))
	waitMetric(t, p, leader, "dyad_peer_protocol_mismatch_total", func(v float64) bool { return v > mismatch })
	waitMetric(t, p, replica, "dyad_peer_protocol_mismatch_total", func(v float64) bool { return v > 0 })
	if v := metric(t, p, leader, "dyad_peer_protocol_version"); v != 0 {
		t.Errorf("the primary speaks protocol %v with a peer it refuses", v)
	}
	if v := metric(t, p, leader, "dyad_role"); v != 3 {
		t.Errorf("the primary's role is %v beside a refused peer, want 3 (solo)", v)
	}
	for _, node := range []testutil.Zone{leader, replica} {
		st := status(t, cur, p, node)
		if !strings.Contains(st.ProtocolRefused, "no common version") {
			t.Errorf("dyad status of %v: protocolRefused %q, want the refusal", node, st.ProtocolRefused)
		}
	}
	if !p.LogContains(replica, "refusing the peer") || !p.LogContains(leader, "refusing the peer") {
		t.Error("a refusal was not logged on both nodes")
	}
	if _, err := p.Client(leader).Put(context.Background(), "after-refusal", "x"); err != nil {
		t.Errorf("the primary does not take writes beside a refused peer: %v", err)
	}
}

// The current build pairs with the previous release: DYAD_PREV_BIN, or
// the revision DYAD_PREV_REV (default: the newest v* tag) built from git.
// The pair speaks what two previous builds settle on (a release from
// before protocol versions speaks version 1 and has no version metric)
// until both nodes are upgraded. Skipped while no release exists.
func TestUpgradeFromPreviousRelease(t *testing.T) {
	prev := os.Getenv("DYAD_PREV_BIN")
	if prev == "" {
		prev = buildRevision(t, os.Getenv("DYAD_PREV_REV"))
	}
	rollingUpgrade(t, prev, testutil.BuildDyad(t), skew{upgraded: curMax})
}

// buildRevision builds cmd/dyad of revision rev of this repository (""
// names the newest v* tag; the test is skipped if there is none).
func buildRevision(t *testing.T, rev string) string {
	t.Helper()
	root, err := testutil.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if rev == "" {
		out, err := exec.Command("git", "-C", root, "describe", "--tags", "--abbrev=0", "--match", "v*", "HEAD").Output()
		if err != nil {
			t.Skip("no release tag to pair with (set DYAD_PREV_REV or DYAD_PREV_BIN)")
		}
		rev = strings.TrimSpace(string(out))
	}
	src := t.TempDir()
	extract := exec.Command("sh", "-c", `git -C "$1" archive "$2" | tar -x -C "$3"`, "sh", root, rev, src)
	if out, err := extract.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(t.TempDir(), "dyad-"+rev)
	build := exec.Command("go", "build", "-o", bin, "./cmd/dyad")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", rev, err, out)
	}
	return bin
}

// skew is the protocol version a pair speaks with both nodes on the old
// build, with one on each, and with both upgraded. old 0: what a pair of
// the old build settles on, which a mixed pair speaks too (an older build
// speaks less than this one).
type skew struct{ old, mixed, upgraded int }

// rollingUpgrade starts a pair of oldBin, and under writes on both nodes
// upgrades it to newBin node by node (the replica, a hand-over, the
// other), then rolls it back the same way, checking after each step that
// the pair is synchronous again at the version v says and logging the
// write outage of the step. Then it reads every acknowledged write back
// from both nodes. It returns the pair, running oldBin again, and the
// zone that leads.
func rollingUpgrade(t *testing.T, oldBin, newBin string, v skew) (*testutil.Pair, testutil.Zone) {
	p := testutil.NewPair(t, oldBin, time.Second)
	p.Start(testutil.ZoneA)
	p.Start(testutil.ZoneB)
	leader := p.WaitPair(within)
	if v.old == 0 {
		v.old = waitSync(t, p, leader, 0)
		v.mixed = v.old
		t.Logf("the old build's pair speaks protocol %d", v.old)
	} else {
		waitSync(t, p, leader, v.old)
	}

	w := startWorkload(t, p, 2)
	defer w.stop()
	w.waitProgress(t, 50)

	// One step: replace the replica's binary, or hand the role over.
	step := func(name string, do func()) {
		t.Helper()
		from := time.Now()
		do()
		w.waitProgress(t, 50) // writes flow again after the step
		t.Logf("%-32s write outage %v (%d writes acknowledged so far)", name, w.outage(from, time.Now()).Round(time.Millisecond), w.count())
	}
	restart := func(node testutil.Zone, bin string, version int) func() {
		return func() {
			t.Helper()
			if err := p.Proc(node).Term(); err != nil {
				t.Fatalf("stopping %v: %v", node, err)
			}
			p.Bin = bin
			p.Start(node)
			waitSync(t, p, node.Other(), version)
		}
	}
	handOver := func(to testutil.Zone, version int) func() {
		return func() {
			t.Helper()
			target, _ := p.Leader(to)
			ctx, cancel := context.WithTimeout(context.Background(), within)
			defer cancel()
			if _, err := p.Client(to.Other()).MoveLeader(ctx, target); err != nil {
				t.Fatalf("move-leader to %v: %v", to, err)
			}
			waitSync(t, p, to, version)
		}
	}

	replica := leader.Other()
	step("upgrade the replica ("+replica.String()+")", restart(replica, newBin, v.mixed))
	step("hand over to it", handOver(replica, v.mixed))
	step("upgrade the other ("+leader.String()+")", restart(leader, newBin, v.upgraded))
	step("roll back the replica ("+leader.String()+")", restart(leader, oldBin, v.mixed))
	step("hand back to it", handOver(leader, v.mixed))
	step("roll back the other ("+replica.String()+")", restart(replica, oldBin, v.old))

	w.stop()
	w.verify(t, p, leader)
	w.verify(t, p, replica)
	p.Converged(leader)
	return p, leader
}

// waitSync waits until leader leads synchronously (dyad_role 2) with its
// replica (dyad_role 1) and both speak protocol version (0: any one, the
// same on both), and returns the version. A build from before protocol
// versions has no dyad_peer_protocol_version: it speaks 1.
func waitSync(t *testing.T, p *testutil.Pair, leader testutil.Zone, version int) int {
	t.Helper()
	speaks := func(n testutil.Zone) float64 {
		v := metricOr(p, n, "dyad_peer_protocol_version", -1)
		if v == -1 && metricOr(p, n, "dyad_role", -1) >= 0 {
			return 1
		}
		return v
	}
	deadline := time.Now().Add(within)
	for {
		ra, rb := metricOr(p, leader, "dyad_role", -1), metricOr(p, leader.Other(), "dyad_role", -1)
		va, vb := speaks(leader), speaks(leader.Other())
		if ra == 2 && rb == 1 && va == vb && (va == float64(version) || version == 0 && va >= 1) {
			return int(va)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no synchronous pair led by %v at protocol %d within %v (roles %v/%v, versions %v/%v)", leader, version, within, ra, rb, va, vb)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func waitMetric(t *testing.T, p *testutil.Pair, node testutil.Zone, name string, ok func(float64) bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok(metricOr(p, node, name, -1)) {
		if time.Now().After(deadline) {
			t.Fatalf("%s of %v is %v", name, node, metricOr(p, node, name, -1))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func metric(t *testing.T, p *testutil.Pair, node testutil.Zone, name string) float64 {
	t.Helper()
	v := metricOr(p, node, name, -1)
	if v < 0 {
		t.Fatalf("%s of %v cannot be read", name, node)
	}
	return v
}

// metricOr is node's unlabelled series name, or def if it cannot be read.
func metricOr(p *testutil.Pair, node testutil.Zone, name string, def float64) float64 {
	cli := http.Client{Timeout: time.Second}
	resp, err := cli.Get(p.MetricsURL(node) + "/metrics")
	if err != nil {
		return def
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return def
}

// status runs `dyad status -w json` of bin against node.
func status(t *testing.T, bin string, p *testutil.Pair, node testutil.Zone) (st struct {
	Protocols       string `json:"protocols"`
	Protocol        int    `json:"protocol"`
	ProtocolRefused string `json:"protocolRefused"`
}) {
	t.Helper()
	out, err := exec.Command(bin, "status", "-w", "json", "--endpoints", p.Endpoint(node)).Output()
	if err != nil {
		t.Fatalf("dyad status of %v: %v\n%s", node, err, out)
	}
	var sts []json.RawMessage
	if err := json.Unmarshal(out, &sts); err != nil || len(sts) != 1 {
		t.Fatalf("dyad status of %v: %v\n%s", node, err, out)
	}
	if err := json.Unmarshal(sts[0], &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// workload writes unique keys through both nodes and records every
// acknowledged write and when it was acknowledged.
type workload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	acked  map[string]string
	ackAt  []time.Time
	failed int
}

func startWorkload(t *testing.T, p *testutil.Pair, writers int) *workload {
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{cancel: cancel, acked: map[string]string{}}
	for _, node := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		for c := 0; c < writers; c++ {
			cli := p.Client(node)
			w.wg.Add(1)
			go w.writer(ctx, cli, fmt.Sprintf("%v%d", node, c))
		}
	}
	return w
}

func (w *workload) writer(ctx context.Context, cli *clientv3.Client, id string) {
	defer w.wg.Done()
	for seq := 0; ctx.Err() == nil; seq++ {
		key, val := fmt.Sprintf("w/%s/%06d", id, seq), fmt.Sprintf("v%d", seq)
		octx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := cli.Put(octx, key, val)
		cancel()
		w.mu.Lock()
		if err == nil {
			w.acked[key] = val
			w.ackAt = append(w.ackAt, time.Now())
		} else {
			w.failed++
		}
		w.mu.Unlock()
		if err != nil && !errors.Is(err, context.Canceled) {
			// A node without a primary answers at once: do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}

func (w *workload) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func (w *workload) waitProgress(t *testing.T, n int) {
	t.Helper()
	start := w.count()
	deadline := time.Now().Add(within)
	for w.count() < start+n {
		if time.Now().After(deadline) {
			t.Fatalf("writes did not resume: %d acknowledged in %s", w.count()-start, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outage is the longest time within [from, to] in which no write was
// acknowledged.
func (w *workload) outage(from, to time.Time) time.Duration {
	w.mu.Lock()
	at := append([]time.Time(nil), w.ackAt...)
	w.mu.Unlock()
	sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
	longest, prev := time.Duration(0), from
	for _, a := range at {
		if a.Before(from) {
			continue
		}
		if a.After(to) {
			break
		}
		longest = max(longest, a.Sub(prev))
		prev = a
	}
	return max(longest, to.Sub(prev))
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

// verify reads every acknowledged write back from node.
func (w *workload) verify(t *testing.T, p *testutil.Pair, node testutil.Zone) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	resp, err := p.Client(node).Get(ctx, "w/", clientv3.WithPrefix())
	if err != nil {
		t.Fatalf("reading back from %v: %v", node, err)
	}
	have := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		have[string(kv.Key)] = string(kv.Value)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	lost := 0
	for k, v := range w.acked {
		if have[k] != v {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged write %s=%s lost on %v (have %q)", k, v, node, have[k])
			}
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost on %v", lost, len(w.acked), node)
	}
	t.Logf("%d writes acknowledged, %d failed or timed out; all %d present on %v", len(w.acked), w.failed, len(w.acked), node)
}
