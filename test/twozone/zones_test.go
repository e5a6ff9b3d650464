package twozone

import (
	"bufio"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// zones is one test's dyad pair (testutil.Pair: two network namespaces
// whose replication link runs through a bridge with faults by tc netem, or
// a userspace shaper where the kernel lacks netem), addressed by node index
// 0 (a) and 1 (b). Requires root.
type zones struct {
	*testutil.Pair
	t     *testing.T
	net   *testutil.Zones
	bin   string
	dir   string
	lease time.Duration
}

func newZones(t *testing.T) *zones {
	p := testutil.NewPair(t, testutil.BuildDyad(t), time.Second)
	return &zones{Pair: p, t: t, net: p.Net, bin: p.Bin, dir: p.Dir, lease: p.Lease}
}

// start runs node i (0: a, 1: b) inside its namespace.
func (z *zones) start(i int, extra ...string) { z.Start(testutil.Zone(i), extra...) }

// kill sends SIGKILL to node i.
func (z *zones) kill(i int) { z.Kill(testutil.Zone(i)) }

func (z *zones) signal(i int, sig syscall.Signal) { z.Signal(testutil.Zone(i), sig) }

func (z *zones) endpoint(i int) string { return z.Endpoint(testutil.Zone(i)) }

func (z *zones) client(i int) *clientv3.Client { return z.Client(testutil.Zone(i)) }

// linkDown cuts the replication link from zone i to the other zone (that
// direction only).
func (z *zones) linkDown(i int) { z.net.LinkDown(testutil.Zone(i), testutil.Zone(1-i)) }

// shape adds delay and loss (percent) to both directions of the
// replication link.
func (z *zones) shape(delay time.Duration, lossPct float64) { z.net.Netem(delay, lossPct) }

// clearFaults removes every injected fault.
func (z *zones) clearFaults() { z.net.LinkUp() }

// waitPair waits until both nodes agree on a leader and returns its index.
func (z *zones) waitPair(within time.Duration) int { return int(z.WaitPair(within)) }

// waitLeading waits until node i says it leads.
func (z *zones) waitLeading(i int, within time.Duration) { z.WaitLeading(testutil.Zone(i), within) }

func (z *zones) logContains(i int, s string) bool { return z.LogContains(testutil.Zone(i), s) }

func (z *zones) hash(i int, rev int64) uint32 { return z.Hash(testutil.Zone(i), rev) }

// ticks is node i's dyad_replication_ticks_total (-1 if it cannot be read).
func (z *zones) ticks(i int) float64 { return z.metric(i, "dyad_replication_ticks_total") }

// metric is node i's value of the unlabelled metric name (-1 if it cannot
// be read).
func (z *zones) metric(i int, name string) float64 {
	cli := http.Client{Timeout: time.Second}
	resp, err := cli.Get(z.MetricsURL(testutil.Zone(i)) + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// runFor waits until node i (just started) has run its role rules for d
// of its own time: ticks come every lease/8 and never faster, so n of them
// span at least (n-1) periods however slowly the machine ran the node.
// This, not a sleep, is how a test knows a rule timed on the node's clock
// ("lead after waiting 2 leases") had its chance to fire.
func (z *zones) runFor(i int, d time.Duration) {
	z.t.Helper()
	want := float64(d/(z.lease/8)) + 1
	deadline := time.Now().Add(10*d + 30*time.Second)
	for {
		n := z.ticks(i)
		if n >= want {
			return
		}
		if time.Now().After(deadline) {
			z.t.Fatalf("node %c: %v replication ticks, want %v (its apply loop does not run)", 'a'+i, n, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func withPrefixCountOnly() []clientv3.OpOption {
	return []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithCountOnly()}
}

// leader asks node i for its member id and the leader it knows (zeros if
// it knows none or is down).
func (z *zones) leader(i int) (member, leader uint64) { return z.Leader(testutil.Zone(i)) }
