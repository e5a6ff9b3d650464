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
	"sync"
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
	bin    string
	dir    string
	tag    string   // unique per test: names of namespaces and links
	ns     []string // namespace of zone a, b
	repl   []string // replication-link veth inside each namespace
	replIP []string
	cliIP  []string // address of each node's client link (reached from the test)
	procs  []*exec.Cmd
	logs   []*os.File
	lease  time.Duration
}

func sh(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

var subnetSeq = struct {
	sync.Mutex
	n int
}{}

// newZones creates the namespaces and links. Requires root.
func newZones(t *testing.T) *zones {
	if os.Geteuid() != 0 {
		if testutil.PeersRequired() {
			t.Fatal("two-zone tests need root (network namespaces)")
		}
		t.Skip("two-zone tests need root (network namespaces)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		if testutil.PeersRequired() {
			t.Fatal("two-zone tests need iproute2")
		}
		t.Skip("two-zone tests need iproute2")
	}
	subnetSeq.Lock()
	subnetSeq.n++
	n := (os.Getpid()+subnetSeq.n)%200 + 20
	subnetSeq.Unlock()
	z := &zones{t: t, bin: testutil.BuildDyad(t), dir: t.TempDir(), tag: fmt.Sprintf("dz%d", n), lease: time.Second}
	z.ns = []string{z.tag + "a", z.tag + "b"}
	z.repl = []string{z.tag + "ra", z.tag + "rb"}
	z.replIP = []string{fmt.Sprintf("10.213.%d.1", n), fmt.Sprintf("10.213.%d.2", n)}
	z.cliIP = []string{fmt.Sprintf("10.214.%d.2", n), fmt.Sprintf("10.215.%d.2", n)}
	z.cleanupNet() // leftovers of a crashed earlier run
	t.Cleanup(z.cleanup)
	for i, ns := range z.ns {
		sh(t, "ip", "netns", "add", ns)
		sh(t, "ip", "-n", ns, "link", "set", "lo", "up")
		// Client link: root <-> zone.
		host, peer := fmt.Sprintf("%sc%d", z.tag, i), fmt.Sprintf("%sz%d", z.tag, i)
		sh(t, "ip", "link", "add", host, "type", "veth", "peer", "name", peer)
		sh(t, "ip", "link", "set", peer, "netns", ns)
		sub := []string{"10.214", "10.215"}[i]
		sh(t, "ip", "addr", "add", fmt.Sprintf("%s.%d.1/24", sub, n), "dev", host)
		sh(t, "ip", "link", "set", host, "up")
		sh(t, "ip", "-n", ns, "addr", "add", z.cliIP[i]+"/24", "dev", peer)
		sh(t, "ip", "-n", ns, "link", "set", peer, "up")
	}
	// Replication link: zone a <-> zone b.
	sh(t, "ip", "link", "add", z.repl[0], "netns", z.ns[0], "type", "veth", "peer", "name", z.repl[1], "netns", z.ns[1])
	for i, ns := range z.ns {
		sh(t, "ip", "-n", ns, "addr", "add", z.replIP[i]+"/24", "dev", z.repl[i])
		sh(t, "ip", "-n", ns, "link", "set", z.repl[i], "up")
	}
	z.procs = make([]*exec.Cmd, 2)
	z.logs = make([]*os.File, 2)
	return z
}

func (z *zones) cleanupNet() {
	for i, ns := range z.ns {
		exec.Command("ip", "netns", "del", ns).Run()
		exec.Command("ip", "link", "del", fmt.Sprintf("%sc%d", z.tag, i)).Run()
	}
}

func (z *zones) cleanup() {
	for i := range z.procs {
		z.kill(i)
	}
	z.cleanupNet()
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

// start runs node i (0: a, 1: b) inside its namespace.
func (z *zones) start(i int, extra ...string) {
	name := []string{"a", "b"}[i]
	args := []string{"netns", "exec", z.ns[i], z.bin, "serve", "--name", name,
		"--data-dir", filepath.Join(z.dir, name),
		"--initial-cluster", fmt.Sprintf("a=http://%s:2380,b=http://%s:2380", z.replIP[0], z.replIP[1]),
		"--dds-interface", z.repl[i],
		"--peer-lease", z.lease.String(),
		"--listen-client-urls", fmt.Sprintf("http://%s:2379", z.cliIP[i]),
		"--log-format", "text"}
	args = append(args, extra...)
	f, err := os.OpenFile(filepath.Join(z.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
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

// nft runs an nftables command inside namespace ns.
func (z *zones) nft(ns string, args ...string) error {
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("nft %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// dropOut drops, in zone i, the given per-mille of packets leaving on the
// replication link (1000: the link is down in that direction).
func (z *zones) dropOut(i, perMille int) {
	ns := z.ns[i]
	z.nft(ns, "delete", "table", "inet", "dyadfault") // absent the first time
	rule := []string{"add", "rule", "inet", "dyadfault", "out", "oifname", z.repl[i], "numgen", "random", "mod", "1000", "<", fmt.Sprint(perMille), "drop"}
	if perMille >= 1000 {
		rule = []string{"add", "rule", "inet", "dyadfault", "out", "oifname", z.repl[i], "drop"}
	}
	for _, cmd := range [][]string{
		{"add", "table", "inet", "dyadfault"},
		{"add", "chain", "inet", "dyadfault", "out", "{ type filter hook output priority 0 ; }"},
		rule,
	} {
		if err := z.nft(ns, cmd...); err != nil {
			z.t.Fatal(err)
		}
	}
}

// loss drops pct percent of the replication traffic, both directions.
func (z *zones) loss(pct float64) {
	for i := range z.ns {
		z.dropOut(i, int(pct*10))
	}
}

// delay adds d to the replication link with netem when the kernel has it
// (sch_netem); it reports whether it could.
func (z *zones) delay(d time.Duration) bool {
	for i, ns := range z.ns {
		out, err := exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", z.repl[i], "root", "netem",
			"delay", fmt.Sprintf("%dms", d.Milliseconds())).CombinedOutput()
		if err != nil {
			z.t.Logf("netem delay not available in this kernel (%s): delay not injected", strings.TrimSpace(string(out)))
			return false
		}
	}
	return true
}

// clearFaults removes every injected fault.
func (z *zones) clearFaults() {
	for i, ns := range z.ns {
		z.nft(ns, "delete", "table", "inet", "dyadfault")
		exec.Command("ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", z.repl[i], "root").Run()
	}
}

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
