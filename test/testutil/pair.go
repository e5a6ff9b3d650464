package testutil

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Ports a Pair's nodes listen on inside their zones.
const (
	PairClientPort  = 2379
	PairMetricsPort = 2381
)

// Pair is a two-zone dyad pair on a Zones fixture: node a in zone a, node b
// in zone b, replicating over the faultable link, each serving clients (and
// its metrics listener) on its client link. Nodes are started, killed and
// restarted individually; every start of a node gets its own log file and
// LogContains searches all of them.
type Pair struct {
	t     testing.TB
	Net   *Zones
	Bin   string        // the dyad binary
	Dir   string        // holds the data dirs a and b (see DataDir)
	Lease time.Duration // --peer-lease

	mu      sync.Mutex
	dataDir [2]string
	procs   [2]*Proc
	started [2][]*Proc // every start, for LogContains
}

// NewPair creates the zones and a pair that will run bin with a peer lease
// of lease; no node is started yet.
func NewPair(t testing.TB, bin string, lease time.Duration) *Pair {
	t.Helper()
	net := NewZones(t)
	p := &Pair{t: t, Net: net, Bin: bin, Dir: t.TempDir(), Lease: lease}
	for i := range p.dataDir {
		p.dataDir[i] = filepath.Join(p.Dir, Zone(i).String())
	}
	return p
}

// DataDir is node's data directory: <Dir>/<a|b> unless SetDataDir moved it.
func (p *Pair) DataDir(node Zone) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dataDir[node]
}

// SetDataDir makes the next starts of node use dir (for example a small
// filesystem mounted by the test).
func (p *Pair) SetDataDir(node Zone, dir string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dataDir[node] = dir
}

// Start runs node with extra serve flags appended to the pair's own.
func (p *Pair) Start(node Zone, extra ...string) { p.StartEnv(node, nil, extra...) }

// StartEnv is Start with extra KEY=VALUE environment entries (for example
// DYAD_FAILPOINTS of a failpoints build).
func (p *Pair) StartEnv(node Zone, env []string, extra ...string) {
	p.t.Helper()
	args := []string{"serve", "--name", node.String(),
		"--data-dir", p.DataDir(node),
		"--initial-cluster", fmt.Sprintf("a=http://%s:2380,b=http://%s:2380", p.Net.ReplIP(ZoneA), p.Net.ReplIP(ZoneB)),
		"--dds-interface", ReplIface,
		"--peer-lease", p.Lease.String(),
		"--listen-client-urls", "http://" + p.Net.ClientAddr(node, PairClientPort),
		"--listen-metrics-urls", "http://" + p.Net.ClientAddr(node, PairMetricsPort),
		"--log-format", "text"}
	proc := p.Net.StartInZoneEnv(node, env, p.Bin, append(args, extra...)...)
	p.mu.Lock()
	p.procs[node] = proc
	p.started[node] = append(p.started[node], proc)
	p.mu.Unlock()
}

// Proc is node's current process (nil before the first start or after
// Kill).
func (p *Pair) Proc(node Zone) *Proc {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.procs[node]
}

// Running reports whether node's current process is alive.
func (p *Pair) Running(node Zone) bool {
	proc := p.Proc(node)
	return proc != nil && !proc.Exited()
}

// Kill sends SIGKILL to node (a no-op if it is not running) and forgets it.
func (p *Pair) Kill(node Zone) {
	p.mu.Lock()
	proc := p.procs[node]
	p.procs[node] = nil
	p.mu.Unlock()
	if proc != nil {
		proc.Kill9()
	}
}

// Signal sends sig to node's process; the test fails if it is not running.
func (p *Pair) Signal(node Zone, sig syscall.Signal) {
	p.t.Helper()
	proc := p.Proc(node)
	if proc == nil {
		p.t.Fatalf("signal %v to node %v: not running", sig, node)
	}
	if err := proc.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to node %v: %v", sig, node, err)
	}
}

// Endpoint is node's client address (host:port) as the test dials it.
func (p *Pair) Endpoint(node Zone) string { return p.Net.ClientAddr(node, PairClientPort) }

// MetricsURL is node's metrics listener (http://host:port).
func (p *Pair) MetricsURL(node Zone) string {
	return "http://" + p.Net.ClientAddr(node, PairMetricsPort)
}

// Client returns a new client of node, closed when the test ends.
func (p *Pair) Client(node Zone) *clientv3.Client {
	p.t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint(node)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { cli.Close() })
	return cli
}

// Leader asks node for its member id and the leader it knows; zeros if it
// knows none or does not answer.
func (p *Pair) Leader(node Zone) (member, leader uint64) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{p.Endpoint(node)}, DialTimeout: 500 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, p.Endpoint(node))
	if err != nil {
		return 0, 0
	}
	return st.Header.MemberId, st.Leader
}

// WaitPair waits until both nodes name the same leader, one of them, and
// returns it; the test fails after within.
func (p *Pair) WaitPair(within time.Duration) Zone {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ma, la := p.Leader(ZoneA)
		mb, lb := p.Leader(ZoneB)
		if la != 0 && la == lb {
			if la == ma {
				return ZoneA
			}
			if la == mb {
				return ZoneB
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.t.Fatalf("the pair did not form within %s", within)
	return 0
}

// WaitLeading waits until node says it leads; the test fails after within.
func (p *Pair) WaitLeading(node Zone, within time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m, l := p.Leader(node); m != 0 && m == l {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("node %v does not lead within %s", node, within)
}

// LogContains reports whether any log of any start of node has a line
// containing s.
func (p *Pair) LogContains(node Zone, s string) bool {
	p.mu.Lock()
	procs := append([]*Proc(nil), p.started[node]...)
	p.mu.Unlock()
	for _, proc := range procs {
		f, err := os.Open(proc.LogPath())
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		found := false
		for sc.Scan() {
			if strings.Contains(sc.Text(), s) {
				found = true
				break
			}
		}
		f.Close()
		if found {
			return true
		}
	}
	return false
}

// Hash is HashKV of node at rev; the test fails if it cannot be read.
func (p *Pair) Hash(node Zone, rev int64) uint32 {
	p.t.Helper()
	cli := p.Client(node)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.HashKV(ctx, p.Endpoint(node), rev)
	if err != nil {
		p.t.Fatalf("hashkv on %v: %v", node, err)
	}
	return resp.Hash
}

// Converged writes a marker through leader, waits until the other node has
// applied it, and fails the test unless both nodes' HashKV agree at that
// revision. It returns the marker's revision.
func (p *Pair) Converged(leader Zone) int64 {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := p.Client(leader).Put(ctx, "sync-marker", time.Now().String())
	if err != nil {
		p.t.Fatalf("marker write: %v", err)
	}
	rev := resp.Header.Revision
	other := leader.Other()
	cli := p.Client(other)
	for {
		g, err := cli.Get(ctx, "sync-marker", clientv3.WithSerializable())
		if err == nil && g.Header.Revision >= rev {
			break
		}
		if ctx.Err() != nil {
			p.t.Fatalf("node %v did not reach revision %d", other, rev)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ha, hb := p.Hash(ZoneA, rev), p.Hash(ZoneB, rev); ha != hb {
		p.t.Fatalf("HashKV at %d differs: a %x, b %x", rev, ha, hb)
	}
	return rev
}

// Failpoint arms (term non-empty) or disarms (term "") a failpoint of node
// through its metrics listener; the binary must be a failpoints build.
func (p *Pair) Failpoint(node Zone, name, term string) error {
	method := http.MethodPut
	if term == "" {
		method = http.MethodDelete
	}
	req, err := http.NewRequest(method, p.MetricsURL(node)+"/debug/failpoints/"+name, strings.NewReader(term))
	if err != nil {
		return err
	}
	hc := http.Client{Timeout: 3 * time.Second}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("failpoint %s=%q on %v: %s", name, term, node, resp.Status)
	}
	return nil
}
