package twozone

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// zones is one test's pair of namespaces and its two dyad nodes.
type zones struct {
	t      *testing.T
	net    *testutil.Zones
	bin    string
	dir    string
	ns     []string // namespace of zone a, b
	repl   []string // replication-link veth inside each namespace
	replIP []string
	cliIP  []string // address of each node's client link (reached from the test)
	procs  []*exec.Cmd
	logs   []*os.File
	lease  time.Duration
}

// newZones creates the namespaces and links (testutil.Zones: the
// replication link runs through a bridge whose faults are tc netem, or a
// userspace shaper where the kernel lacks netem). Requires root.
func newZones(t *testing.T) *zones {
	net := testutil.NewZones(t)
	z := &zones{t: t, net: net, bin: testutil.BuildDyad(t), dir: t.TempDir(), lease: time.Second}
	for _, zone := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		z.ns = append(z.ns, net.Namespace(zone))
		z.repl = append(z.repl, testutil.ReplIface)
		z.replIP = append(z.replIP, net.ReplIP(zone))
		z.cliIP = append(z.cliIP, net.ClientIP(zone))
	}
	z.procs = make([]*exec.Cmd, 2)
	z.logs = make([]*os.File, 2)
	// Registered after NewZones: runs first, killing the nodes before the
	// namespaces go.
	t.Cleanup(z.cleanup)
	return z
}

func (z *zones) cleanup() {
	for i := range z.procs {
		z.kill(i)
	}
	if z.t.Failed() {
		for i, f := range z.logs {
			if f == nil {
				continue
			}
			b, _ := os.ReadFile(f.Name())
			lines := strings.Split(string(b), "\n")
			if len(lines) > 150 {
				lines = lines[len(lines)-150:]
			}
			z.t.Logf("---- node %c log (tail) ----\n%s", 'a'+i, strings.Join(lines, "\n"))
		}
	}
}

// start runs node i (0: a, 1: b) inside its namespace, logging to
// <name>.log.
func (z *zones) start(i int, extra ...string) {
	z.startLog(i, []string{"a", "b"}[i]+".log", extra...)
}

// startLog is start with the log file named: several processes can take
// turns as node i, each with its own log.
func (z *zones) startLog(i int, logName string, extra ...string) {
	name := []string{"a", "b"}[i]
	args := []string{"netns", "exec", z.ns[i], z.bin, "serve", "--name", name,
		"--data-dir", filepath.Join(z.dir, name),
		"--initial-cluster", fmt.Sprintf("a=http://%s:2380,b=http://%s:2380", z.replIP[0], z.replIP[1]),
		"--dds-interface", z.repl[i],
		"--peer-lease", z.lease.String(),
		"--listen-client-urls", fmt.Sprintf("http://%s:2379", z.cliIP[i]),
		"--log-format", "text"}
	args = append(args, extra...)
	f, err := os.OpenFile(filepath.Join(z.dir, logName), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		z.t.Fatal(err)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		z.t.Fatal(err)
	}
	z.procs[i], z.logs[i] = cmd, f
}

// kill sends SIGKILL to node i (ip netns exec execs dyad: the pid is dyad's).
func (z *zones) kill(i int) {
	if p := z.procs[i]; p != nil {
		p.Process.Kill()
		p.Wait()
		z.procs[i] = nil
	}
}

func (z *zones) signal(i int, sig syscall.Signal) {
	if err := z.procs[i].Process.Signal(sig); err != nil {
		z.t.Fatal(err)
	}
}

func (z *zones) endpoint(i int) string { return z.cliIP[i] + ":2379" }

func (z *zones) client(i int) *clientv3.Client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{z.endpoint(i)}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		z.t.Fatal(err)
	}
	z.t.Cleanup(func() { cli.Close() })
	return cli
}

// linkDown cuts the replication link from zone i to the other zone (that
// direction only).
func (z *zones) linkDown(i int) {
	z.net.LinkDown(testutil.Zone(i), testutil.Zone(1-i))
}

// shape adds delay and loss (percent) to both directions of the
// replication link.
func (z *zones) shape(delay time.Duration, lossPct float64) {
	z.net.Netem(delay, lossPct)
}

// clearFaults removes every injected fault.
func (z *zones) clearFaults() { z.net.LinkUp() }

// status asks node i for its leader; 0 if it knows none or is down.
func (z *zones) leader(i int) (member, leader uint64) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{z.endpoint(i)}, DialTimeout: 500 * time.Millisecond, Logger: zap.NewNop()})
	if err != nil {
		return 0, 0
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err := cli.Status(ctx, z.endpoint(i))
	if err != nil {
		return 0, 0
	}
	return st.Header.MemberId, st.Leader
}

// waitPair waits until both nodes agree on a leader and returns its index.
func (z *zones) waitPair(within time.Duration) int {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		ma, la := z.leader(0)
		mb, lb := z.leader(1)
		if la != 0 && la == lb {
			if la == ma {
				return 0
			}
			if la == mb {
				return 1
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	z.t.Fatalf("the pair did not form within %s", within)
	return -1
}

// waitLeading waits until node i says it leads.
func (z *zones) waitLeading(i int, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if m, l := z.leader(i); m != 0 && m == l {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	z.t.Fatalf("node %c does not lead within %s", 'a'+i, within)
}

func (z *zones) logContains(i int, s string) bool {
	b, _ := os.ReadFile(z.logs[i].Name())
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.Contains(sc.Text(), s) {
			return true
		}
	}
	return false
}

func (z *zones) hash(i int, rev int64) uint32 {
	cli := z.client(i)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := cli.HashKV(ctx, z.endpoint(i), rev)
	if err != nil {
		z.t.Fatalf("hashkv on %c: %v", 'a'+i, err)
	}
	return resp.Hash
}

func withPrefixCountOnly() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}
