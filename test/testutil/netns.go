package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/shaper"
	"github.com/dyad-db/dyad/internal/testenv"
)

// Zone names one of the two zones of a Zones fixture.
type Zone int

const (
	ZoneA Zone = 0
	ZoneB Zone = 1
)

func (z Zone) String() string {
	switch z {
	case ZoneA:
		return "a"
	case ZoneB:
		return "b"
	}
	return fmt.Sprintf("zone(%d)", int(z))
}

// Other returns the other zone.
func (z Zone) Other() Zone { return 1 - z }

// Names and addresses used by Zones.
const (
	// NetnsPrefix starts the name of every namespace Zones creates:
	// dyadt-<owner pid>-<owner start time>-<random>-<a|b|m>.
	NetnsPrefix = "dyadt-"
	// ReplIface is the replication veth's name inside each zone.
	ReplIface = "repl"
	// ClientIface is the client veth's name inside each zone.
	ClientIface = "cli"

	// EnvNetnsShaper selects how Netem and LinkDown are implemented:
	// "netem" (tc netem on the zones' replication veths; fail if the
	// kernel lacks sch_netem), "userspace" (a forwarder in the test
	// process, internal/shaper), or empty: netem when the kernel
	// has it.
	EnvNetnsShaper = "DYAD_NETNS_SHAPER"

	netnsDir       = "/run/netns"
	netemQueueLen  = 100000 // netem's limit: packets held while delayed
	bridgeName     = "bridge0"
	replMACPattern = "02:64:79:74:00:%02x" // locally administered; one L2 segment per Zones
)

// Shaping backends.
const (
	ShaperNetem     = "netem"
	ShaperUserspace = "userspace"
)

// Fault is the state of one direction of the replication link (the frames
// one zone sends). It is internal/shaper's, which the userspace shaper runs.
type Fault = shaper.Fault

// Zones is one test's pair of network namespaces ("zones") with the links
// between them (N is chosen per fixture, see Subnet):
//
//	root namespace (the test)
//	  10.214.N.1 ──── client veth ────┐        ┌──── client veth ──── 10.215.N.1
//	                                  │        │
//	  zone a:  "cli"  10.214.N.2 ─────┘        └───── 10.215.N.2 "cli"   zone b
//	           "repl" 10.213.N.1 ── veth ── [m: bridge] ── veth ── 10.213.N.2 "repl"
//
// The replication link joins the zones at layer 2 through a bridge in a
// third namespace ("m"); faults (LinkDown, Netem) act only on it, so the
// client links that carry the test's own traffic are never faulted. Each
// zone has a permanent neighbour entry for the other's replication address,
// so a one-way fault stays one-way (ARP replies cannot be lost).
//
// Faults are applied with tc netem on the egress of the sending zone's
// "repl" veth when the kernel has sch_netem, and otherwise by a forwarder in
// the test process that takes the bridge's place in namespace m while any
// fault is set (see EnvNetnsShaper). Either way a fault change may drop the
// frames in flight at that instant, as replacing a netem qdisc does.
//
// Everything is removed on t.Cleanup, after every process started with
// StartInZone has been killed; a process also gets SIGKILL if the test
// binary dies (Pdeathsig), and SweepStaleNetns (run by NewZones) removes
// namespaces left by a test binary that crashed.
type Zones struct {
	t      testing.TB
	id     string // <pid>-<start>-<rand>: unique per fixture
	n      int    // third octet of every subnet
	ns     [2]string
	mid    string    // namespace holding the bridge
	hostIf [2]string // root-side end of each client veth
	dir    string    // process logs
	shaper string    // ShaperNetem or ShaperUserspace

	subnetLock *os.File // held while choosing and assigning the subnet

	// mu guards the fields below. Lock order: Zones.mu, then the hub's.
	mu      sync.Mutex
	faults  [2]Fault    // indexed by sending zone
	fwd     *shaper.Hub // running while a fault is set (userspace shaper)
	procs   []*Proc
	nprocs  int
	cleaned bool
}

// NewZones creates the namespaces and links for one test. It needs root and
// iproute2 (ip; tc for netem): without them the test is skipped, or fails
// when DYAD_REQUIRE_PEERS=1. A dyad pair on it:
//
//	z := testutil.NewZones(t)
//	bin, dir := testutil.BuildDyad(t), t.TempDir()
//	cluster := fmt.Sprintf("a=http://%s:2380,b=http://%s:2380",
//		z.ReplIP(testutil.ZoneA), z.ReplIP(testutil.ZoneB))
//	var nodes [2]*testutil.Proc
//	for _, zone := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
//		nodes[zone] = z.StartInZone(zone, bin, "serve", "--name", zone.String(),
//			"--data-dir", filepath.Join(dir, zone.String()),
//			"--initial-cluster", cluster, "--dds-interface", testutil.ReplIface,
//			"--listen-client-urls", "http://"+z.ClientAddr(zone, 2379))
//	}
//	// clients dial z.ClientAddr(zone, 2379) from the test; then, e.g.:
//	z.LinkDownBoth()         // partition
//	z.Netem(20*time.Millisecond, 1)
//	nodes[testutil.ZoneA].Kill9() // or Stop() / Cont() / Term()
func NewZones(t testing.TB) *Zones {
	t.Helper()
	if os.Geteuid() != 0 {
		skipOrFail(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "network namespaces need iproute2 (ip): "+err.Error()+"; install Debian's iproute2 (scripts/setup.sh does)")
	}
	if removed, err := SweepStaleNetns(); err != nil {
		t.Logf("testutil: sweeping stale namespaces: %v", err)
	} else if len(removed) > 0 {
		t.Logf("testutil: removed stale namespaces of dead test runs: %s", strings.Join(removed, " "))
	}
	self, err := procStart(os.Getpid())
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	z := &Zones{t: t, dir: t.TempDir()}
	// Registered after t.TempDir, so it runs before the logs are removed.
	t.Cleanup(z.cleanup)

	for attempt := 0; ; attempt++ {
		z.id = fmt.Sprintf("%d-%d-%04x", os.Getpid(), self, rand.IntN(1<<16))
		z.ns = [2]string{NetnsPrefix + z.id + "-a", NetnsPrefix + z.id + "-b"}
		z.mid = NetnsPrefix + z.id + "-m"
		out, err := exec.Command("ip", "netns", "add", z.ns[0]).CombinedOutput()
		if err == nil {
			break
		}
		if attempt < 5 && bytes.Contains(out, []byte("exists")) {
			continue
		}
		skipOrFail(t, fmt.Sprintf("ip netns add failed (%v): %s", err, bytes.TrimSpace(out)))
	}
	z.run("ip", "netns", "add", z.ns[1])
	z.run("ip", "netns", "add", z.mid)
	// Root-side interface names must be unique in the root namespace and
	// at most 15 bytes: "dy" + pid (<= 7 digits) + "-" + 4 hex + zone.
	for i := range z.hostIf {
		z.hostIf[i] = fmt.Sprintf("dy%d-%s%s", os.Getpid(), z.id[len(z.id)-4:], Zone(i))
	}
	z.setupReplication()
	z.setupClientLinks()
	z.shaper = z.chooseShaper()
	return z
}

// skipOrFail ends the test for a missing prerequisite: a skip, or a
// failure under DYAD_REQUIRE_PEERS=1 (internal/testenv decides for the
// whole tree).
func skipOrFail(t testing.TB, msg string) {
	t.Helper()
	testenv.Missing(t, msg, "")
}

// run executes a setup command and fails the test if it fails.
func (z *Zones) run(name string, args ...string) {
	z.t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		z.t.Fatalf("testutil: %s %s: %v: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
}

func (z *Zones) setupReplication() {
	z.t.Helper()
	m := z.mid
	// Namespace m only forwards frames; keep its own IPv6 chatter off the
	// link (best effort: a kernel without IPv6 has nothing to switch off).
	_ = exec.Command("ip", "netns", "exec", m, "sysctl", "-qw",
		"net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1").Run()
	// No IGMP snooping: without a querier it would stop forwarding the
	// DDS discovery multicast once memberships time out.
	z.run("ip", "-n", m, "link", "add", "name", bridgeName, "type", "bridge", "mcast_snooping", "0", "stp_state", "0")
	z.run("ip", "-n", m, "link", "set", "dev", bridgeName, "up")
	for i, ns := range z.ns {
		port := mPort(Zone(i))
		z.run("ip", "-n", ns, "link", "set", "dev", "lo", "up")
		z.run("ip", "-n", ns, "link", "add", "name", ReplIface, "address", z.replMAC(Zone(i)), "mtu", "1500",
			"type", "veth", "peer", "name", port, "netns", m)
		z.run("ip", "-n", m, "link", "set", "dev", port, "mtu", "1500", "promisc", "on", "master", bridgeName)
		z.run("ip", "-n", m, "link", "set", "dev", port, "up")
	}
	// The subnet number only needs to be unique in the root namespace, so it
	// is chosen with the client links; the replication link reuses it.
	z.n = z.allocSubnet()
	for i, ns := range z.ns {
		other := Zone(i).Other()
		z.run("ip", "-n", ns, "addr", "add", z.ReplIP(Zone(i))+"/24", "dev", ReplIface)
		z.run("ip", "-n", ns, "link", "set", "dev", ReplIface, "up")
		z.run("ip", "-n", ns, "neigh", "replace", z.ReplIP(other), "lladdr", z.replMAC(other),
			"dev", ReplIface, "nud", "permanent")
	}
}

// mPort names, in namespace m, the veth end toward zone. (Short names such
// as "a" or "br" would be taken by ip for abbreviations of keywords.)
func mPort(zone Zone) string { return "port-" + zone.String() }

func (z *Zones) replMAC(zone Zone) string { return fmt.Sprintf(replMACPattern, 0x0a+int(zone)) }

// allocSubnet picks N such that no root-namespace address is in 10.214.N.0/24
// or 10.215.N.0/24, and holds an exclusive lock across processes from the
// choice until setupClientLinks has assigned the addresses (it releases it).
func (z *Zones) allocSubnet() int {
	z.t.Helper()
	lockDir := "/run/lock"
	if st, err := os.Stat(lockDir); err != nil || !st.IsDir() {
		lockDir = os.TempDir()
	}
	f, err := os.OpenFile(filepath.Join(lockDir, "dyadt-subnet.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		z.t.Fatalf("testutil: subnet lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		z.t.Fatalf("testutil: subnet lock: %v", err)
	}
	z.subnetLock = f
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		z.t.Fatalf("testutil: listing addresses: %v", err)
	}
	used := map[int]bool{}
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 10 && (ip4[1] == 214 || ip4[1] == 215) {
			used[int(ip4[2])] = true
		}
	}
	free := make([]int, 0, 254)
	for n := 1; n <= 254; n++ {
		if !used[n] {
			free = append(free, n)
		}
	}
	if len(free) == 0 {
		z.t.Fatalf("testutil: all 254 client subnets 10.214.N.0/24 are in use")
	}
	return free[rand.IntN(len(free))]
}

func (z *Zones) setupClientLinks() {
	z.t.Helper()
	defer z.releaseSubnetLock()
	for i, ns := range z.ns {
		zone := Zone(i)
		host := z.hostIf[i]
		z.run("ip", "link", "add", "name", host, "mtu", "1500", "type", "veth", "peer", "name", ClientIface, "netns", ns)
		z.run("ip", "addr", "add", z.HostIP(zone)+"/24", "dev", host)
		z.run("ip", "link", "set", "dev", host, "up")
		z.run("ip", "-n", ns, "addr", "add", z.ClientIP(zone)+"/24", "dev", ClientIface)
		z.run("ip", "-n", ns, "link", "set", "dev", ClientIface, "up")
	}
}

func (z *Zones) releaseSubnetLock() {
	if z.subnetLock != nil {
		z.subnetLock.Close() // releases the flock
		z.subnetLock = nil
	}
}

// chooseShaper decides between netem and the userspace forwarder.
func (z *Zones) chooseShaper() string {
	z.t.Helper()
	want := strings.TrimSpace(os.Getenv(EnvNetnsShaper))
	switch want {
	case ShaperUserspace:
		return ShaperUserspace
	case "", ShaperNetem:
	default:
		z.t.Fatalf("testutil: %s=%q; want %q, %q or empty", EnvNetnsShaper, want, ShaperNetem, ShaperUserspace)
	}
	probe := exec.Command("tc", "-n", z.ns[0], "qdisc", "add", "dev", ReplIface, "root", "netem", "delay", "0ms")
	out, err := probe.CombinedOutput()
	if err == nil {
		z.run("tc", "-n", z.ns[0], "qdisc", "del", "dev", ReplIface, "root")
		return ShaperNetem
	}
	if want == ShaperNetem {
		z.t.Fatalf("testutil: %s=netem but tc netem does not work here: %v: %s", EnvNetnsShaper, err, bytes.TrimSpace(out))
	}
	return ShaperUserspace
}

// Shaper reports how faults are injected: ShaperNetem or ShaperUserspace.
func (z *Zones) Shaper() string { return z.shaper }

// Namespace returns the name of zone's network namespace (for ip netns exec).
func (z *Zones) Namespace(zone Zone) string { return z.ns[zone] }

// Namespaces returns every namespace the fixture created (a, b, m).
func (z *Zones) Namespaces() []string { return []string{z.ns[0], z.ns[1], z.mid} }

// HostInterfaces returns the root-side ends of the client veths.
func (z *Zones) HostInterfaces() []string { return []string{z.hostIf[0], z.hostIf[1]} }

// Subnet is the N in 10.213.N.0/24 (replication), 10.214.N.0/24 (zone a's
// client link) and 10.215.N.0/24 (zone b's client link).
func (z *Zones) Subnet() int { return z.n }

// ReplIP is zone's address on the replication link (10.213.N.1 or .2), on
// the interface ReplIface inside the zone.
func (z *Zones) ReplIP(zone Zone) string { return fmt.Sprintf("10.213.%d.%d", z.n, int(zone)+1) }

// ClientIP is the address the test (root namespace) dials to reach a
// process in zone: 10.214.N.2 for a, 10.215.N.2 for b, on ClientIface.
func (z *Zones) ClientIP(zone Zone) string { return fmt.Sprintf("10.%d.%d.2", 214+int(zone), z.n) }

// ClientAddr is ClientIP(zone):port.
func (z *Zones) ClientAddr(zone Zone, port int) string {
	return net.JoinHostPort(z.ClientIP(zone), strconv.Itoa(port))
}

// HostIP is the root namespace's address on zone's client link, the source
// address processes in the zone see for the test's connections.
func (z *Zones) HostIP(zone Zone) string { return fmt.Sprintf("10.%d.%d.1", 214+int(zone), z.n) }

// ---- faults on the replication link ----

// LinkDown drops every frame from zone from to the other zone; the other
// direction is untouched.
func (z *Zones) LinkDown(from, to Zone) {
	z.t.Helper()
	if from == to {
		z.t.Fatalf("testutil: LinkDown(%v, %v): a zone has no link to itself", from, to)
	}
	z.setFaults(func(f *[2]Fault) { f[from].Down = true })
}

// LinkDownBoth cuts the replication link in both directions.
func (z *Zones) LinkDownBoth() {
	z.t.Helper()
	z.setFaults(func(f *[2]Fault) { f[0].Down, f[1].Down = true, true })
}

// LinkUp ends LinkDown and LinkDownBoth, and clears Netem too: afterwards the
// link is clean (the qdiscs are removed).
func (z *Zones) LinkUp() {
	z.t.Helper()
	z.setFaults(func(f *[2]Fault) { *f = [2]Fault{} })
}

// Netem adds delay to, and drops lossPercent of, the frames in both
// directions (a round trip therefore takes at least 2*delay). It replaces
// an earlier Netem setting; a link that is down stays down.
func (z *Zones) Netem(delay time.Duration, lossPercent float64) {
	z.t.Helper()
	z.NetemOneWay(ZoneA, delay, lossPercent)
	z.NetemOneWay(ZoneB, delay, lossPercent)
}

// NetemOneWay is Netem for the frames zone from sends only.
func (z *Zones) NetemOneWay(from Zone, delay time.Duration, lossPercent float64) {
	z.t.Helper()
	if delay < 0 || lossPercent < 0 || lossPercent > 100 {
		z.t.Fatalf("testutil: Netem(%v, %v%%): out of range", delay, lossPercent)
	}
	z.setFaults(func(f *[2]Fault) { f[from].Delay, f[from].Loss = delay, lossPercent })
}

// NetemReorder is Netem that also sends reorderPercent of the frames of
// each direction at once, ahead of the delayed others.
func (z *Zones) NetemReorder(delay time.Duration, lossPercent, reorderPercent float64) {
	z.t.Helper()
	if delay <= 0 || reorderPercent < 0 || reorderPercent > 100 {
		z.t.Fatalf("testutil: NetemReorder(%v, %v%%, %v%%): out of range (reordering needs a delay)", delay, lossPercent, reorderPercent)
	}
	z.Netem(delay, lossPercent)
	z.setFaults(func(f *[2]Fault) { f[0].Reorder, f[1].Reorder = reorderPercent, reorderPercent })
}

// ClearNetem removes delay and loss set by Netem; LinkDown stays in force.
func (z *Zones) ClearNetem() {
	z.t.Helper()
	z.setFaults(func(f *[2]Fault) {
		for i := range f {
			f[i].Delay, f[i].Loss, f[i].Reorder = 0, 0, 0
		}
	})
}

// Faults returns the current fault of each direction, indexed by the
// sending zone.
func (z *Zones) Faults() [2]Fault {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.faults
}

func (z *Zones) setFaults(change func(*[2]Fault)) {
	z.t.Helper()
	z.mu.Lock()
	defer z.mu.Unlock()
	prev := z.faults
	change(&z.faults)
	var err error
	if z.shaper == ShaperNetem {
		for i := range z.faults {
			if z.faults[i] != prev[i] {
				err = errors.Join(err, z.applyNetem(Zone(i), z.faults[i]))
			}
		}
	} else {
		err = z.applyUserspace()
	}
	if err != nil {
		z.t.Fatalf("testutil: injecting %v: %v", z.faults, err)
	}
}

// applyNetem installs f on the egress of from's replication veth.
func (z *Zones) applyNetem(from Zone, f Fault) error {
	ns := z.ns[from]
	if f == (Fault{}) {
		out, err := exec.Command("tc", "-n", ns, "qdisc", "del", "dev", ReplIface, "root").CombinedOutput()
		// The kernel's default qdisc is not deletable; that is a clean link.
		if err != nil && !bytes.Contains(out, []byte("handle of zero")) && !bytes.Contains(out, []byte("No such file")) {
			return fmt.Errorf("tc qdisc del in %s: %v: %s", ns, err, bytes.TrimSpace(out))
		}
		return nil
	}
	args := netemArgs(ns, f)
	if out, err := exec.Command("tc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("tc %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// netemArgs is the tc command line that installs a non-zero f on the
// egress of the replication veth in namespace ns.
func netemArgs(ns string, f Fault) []string {
	args := []string{"-n", ns, "qdisc", "replace", "dev", ReplIface, "root", "netem", "limit", strconv.Itoa(netemQueueLen)}
	if f.Down {
		return append(args, "loss", "100%")
	}
	if f.Delay > 0 {
		args = append(args, "delay", fmt.Sprintf("%dus", f.Delay.Microseconds()))
	}
	if f.Loss > 0 {
		args = append(args, "loss", strconv.FormatFloat(f.Loss, 'f', -1, 64)+"%")
	}
	if f.Reorder > 0 && f.Delay > 0 {
		args = append(args, "reorder", strconv.FormatFloat(f.Reorder, 'f', -1, 64)+"%")
	}
	return args
}

// applyUserspace moves namespace m between the kernel bridge (no fault) and
// the forwarder (any fault). Caller holds z.mu.
func (z *Zones) applyUserspace() error {
	anyFault := z.faults != [2]Fault{}
	m := z.mid
	ports := [2]string{mPort(ZoneA), mPort(ZoneB)}
	switch {
	case anyFault && z.fwd == nil:
		// Open the forwarder first (it discards while the bridge still
		// forwards), then take the ports off the bridge, then let it forward.
		fwd, err := shaper.Open(m, ports[:])
		if err != nil {
			return err
		}
		for i, p := range ports {
			if out, err := exec.Command("ip", "-n", m, "link", "set", "dev", p, "nomaster").CombinedOutput(); err != nil {
				for _, q := range ports[:i] { // best effort: leave the link as it was
					_ = exec.Command("ip", "-n", m, "link", "set", "dev", q, "master", bridgeName).Run()
				}
				fwd.Close()
				return fmt.Errorf("detaching %s from the bridge: %v: %s", p, err, bytes.TrimSpace(out))
			}
		}
		z.fwd = fwd
		fwd.Set(z.faults[:], true)
	case anyFault:
		z.fwd.Set(z.faults[:], true)
	case z.fwd != nil:
		// Back to the bridge: stop forwarding before re-attaching, so that
		// no frame is delivered twice.
		z.fwd.Set(z.faults[:], false)
		var err error
		for _, p := range ports {
			if out, e := exec.Command("ip", "-n", m, "link", "set", "dev", p, "master", bridgeName).CombinedOutput(); e != nil {
				err = errors.Join(err, fmt.Errorf("attaching %s to the bridge: %v: %s", p, e, bytes.TrimSpace(out)))
			}
		}
		z.fwd.Close()
		z.fwd = nil
		return err
	}
	return nil
}

// ---- processes ----

// StartInZone runs bin with args inside zone's namespace (via ip netns exec,
// which execs bin: Pid is bin's own pid). Its stdout and stderr go to a log
// file in the test's temp dir, whose last 200 lines are logged if the test
// fails (or DYAD_KEEP_LOGS=1). The process is killed on cleanup, and by the
// kernel if the test binary dies.
func (z *Zones) StartInZone(zone Zone, bin string, args ...string) *Proc {
	z.t.Helper()
	return z.StartInZoneEnv(zone, nil, bin, args...)
}

// StartInZoneEnv is StartInZone with extra KEY=VALUE environment entries.
func (z *Zones) StartInZoneEnv(zone Zone, env []string, bin string, args ...string) *Proc {
	z.t.Helper()
	z.mu.Lock()
	if z.cleaned {
		z.mu.Unlock()
		z.t.Fatalf("testutil: StartInZone after cleanup")
	}
	z.nprocs++
	seq := z.nprocs
	z.mu.Unlock()
	p, err := startProc(z.ns[zone], zone, seq, z.dir, env, bin, args)
	if err != nil {
		z.t.Fatalf("testutil: starting %s in zone %v: %v", bin, zone, err)
	}
	z.mu.Lock()
	z.procs = append(z.procs, p)
	z.mu.Unlock()
	return p
}

// Exec runs bin with args inside zone's namespace to completion (at most
// timeout) and returns its combined output.
func (z *Zones) Exec(timeout time.Duration, zone Zone, bin string, args ...string) ([]byte, error) {
	cmd := exec.Command("ip", append([]string{"netns", "exec", z.ns[zone], bin}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return buf.Bytes(), err
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return buf.Bytes(), fmt.Errorf("%s in zone %v: still running after %v; killed", bin, zone, timeout)
	}
}

// ---- cleanup and sweeping ----

func (z *Zones) cleanup() {
	z.mu.Lock()
	z.cleaned = true
	procs := z.procs
	fwd := z.fwd
	z.fwd = nil
	z.mu.Unlock()
	for _, p := range procs {
		p.Kill9()
	}
	if fwd != nil {
		fwd.Close()
	}
	z.releaseSubnetLock()
	if z.t.Failed() || os.Getenv(EnvKeepLogs) == "1" {
		for _, p := range procs {
			z.t.Logf("--- zone %v: %s (pid %d, %s), last %d lines ---\n%s",
				p.zone, p.name, p.Pid(), p.LogPath(), procLogTailLines, p.LogTail(procLogTailLines))
		}
	}
	var errs []error
	for _, ns := range z.Namespaces() {
		if ns == "" {
			continue
		}
		if err := deleteNetns(ns); err != nil {
			errs = append(errs, err)
		}
	}
	for _, h := range z.hostIf {
		// Normally gone with its peer's namespace already.
		if h != "" {
			_ = exec.Command("ip", "link", "del", "dev", h).Run()
		}
	}
	if err := errors.Join(errs...); err != nil {
		z.t.Errorf("testutil: removing the namespaces: %v", err)
	}
}

// deleteNetns removes a namespace created by Zones; a missing one is fine.
func deleteNetns(name string) error {
	if _, err := os.Stat(filepath.Join(netnsDir, name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
	if err != nil {
		if _, serr := os.Stat(filepath.Join(netnsDir, name)); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("ip netns del %s: %v: %s", name, err, bytes.TrimSpace(out))
	}
	return nil
}

// SweepStaleNetns removes the namespaces Zones fixtures of dead test
// binaries left behind (a crash, a test timeout, a kill -9), and returns
// their names. A namespace is stale when the owner named in it
// (dyadt-<pid>-<start time>-...) no longer runs: no process has that pid,
// the one that has it started at another time (the pid was reused), or it
// is a zombie.
// Namespaces of live test binaries, such as other packages' tests running
// in parallel, are left alone. Processes still inside a stale namespace
// are killed first.
func SweepStaleNetns() ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, NetnsPrefix) {
			continue
		}
		pid, start, ok := parseNetnsOwner(name)
		if !ok {
			continue // not ours to judge
		}
		if ownerAlive(pid, start) {
			continue
		}
		if out, err := exec.Command("ip", "netns", "pids", name).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if p, err := strconv.Atoi(f); err == nil && p > 1 {
					_ = syscall.Kill(p, syscall.SIGKILL)
				}
			}
		}
		if err := deleteNetns(name); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// parseNetnsOwner extracts pid and start time from
// dyadt-<pid>-<start>-<rand>-<zone>.
func parseNetnsOwner(name string) (pid int, start uint64, ok bool) {
	f := strings.Split(strings.TrimPrefix(name, NetnsPrefix), "-")
	if len(f) != 4 {
		return 0, 0, false
	}
	p, err1 := strconv.Atoi(f[0])
	s, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || p <= 0 {
		return 0, 0, false
	}
	return p, s, true
}

// ownerAlive reports whether process pid, started at start, still runs. A
// zombie (exited, not yet reaped by its parent) does not.
func ownerAlive(pid int, start uint64) bool {
	st, state, err := procStat(pid)
	return err == nil && st == start && state != "Z" && state != "X"
}

// procStart returns the start time of process pid in clock ticks since boot
// (field 22 of /proc/<pid>/stat), which together with the pid identifies a
// process across pid reuse.
func procStart(pid int) (uint64, error) {
	start, _, err := procStat(pid)
	return start, err
}

// procStat returns the start time and the state letter of process pid.
func procStat(pid int) (start uint64, state string, err error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, "", err
	}
	start, err = strconv.ParseUint(f[19], 10, 64) // field 22
	return start, f[0], err
}

// procStatFields returns the fields of /proc/<pid>/stat from field 3 (the
// state) on: field n is at index n-3. At least 20 are there (up to the
// start time).
func procStatFields(pid int) ([]string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return nil, err
	}
	// The command name (field 2) is in parentheses and may contain spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return nil, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	return f, nil
}

// userHZ is the unit of the CPU times in /proc/<pid>/stat: clock ticks of
// USER_HZ, which Linux fixes at 100 for what it shows user space.
const userHZ = 100

// procCPU is the CPU time process pid has used so far, user and system
// (fields 14 and 15 of /proc/<pid>/stat).
func procCPU(pid int) (time.Duration, error) {
	f, err := procStatFields(pid)
	if err != nil {
		return 0, err
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / userHZ, nil
}
