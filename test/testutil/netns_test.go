package testutil

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests re-execute this test binary as a small network helper inside the
// namespaces, so they need no tool besides iproute2:
//
//	<test binary> -test.run=^TestNetnsHelper$ -- netns-helper <mode> <args>
//
// Modes:
//
//	serve <port>               TCP echo on :port, UDP datagram counter on
//	                           :port, TCP "how many datagrams carried <tag>"
//	                           query on :port+1; prints READY
//	dial <addr> <bytes> <ms>   TCP to an echo server: prints "RTT <ns>" (the
//	                           minimum of 5 one-byte round trips) after
//	                           echoing <bytes> bytes, or "ERR ..." and exit 1
//	udp <addr> <tag> <count>   send <count> datagrams <tag>, 5 ms apart
//	exit <code>                exit with <code>
const helperMarker = "netns-helper"

func TestNetnsHelper(t *testing.T) {
	args := flag.Args()
	if len(args) == 0 || args[0] != helperMarker {
		t.Skip("helper process for the netns tests; runs only when re-executed")
	}
	os.Exit(runHelper(args[1:]))
}

// helper returns the command that runs the helper in mode.
func helper(t *testing.T, mode ...string) (string, []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe, append([]string{"-test.run=^TestNetnsHelper$", "--", helperMarker}, mode...)
}

func runHelper(args []string) int {
	fail := func(err error) int { fmt.Println("ERR", err); return 1 }
	switch {
	case len(args) == 2 && args[0] == "serve":
		port, err := strconv.Atoi(args[1])
		if err != nil {
			return fail(err)
		}
		return helperServe(port)
	case len(args) == 4 && args[0] == "dial":
		n, err1 := strconv.Atoi(args[2])
		ms, err2 := strconv.Atoi(args[3])
		if err := errors.Join(err1, err2); err != nil {
			return fail(err)
		}
		rtt, err := dialEcho(args[1], n, time.Duration(ms)*time.Millisecond)
		if err != nil {
			return fail(err)
		}
		fmt.Println("RTT", rtt.Nanoseconds())
		return 0
	case len(args) == 4 && args[0] == "udp":
		count, err := strconv.Atoi(args[3])
		if err != nil {
			return fail(err)
		}
		c, err := net.Dial("udp", args[1])
		if err != nil {
			return fail(err)
		}
		defer c.Close()
		for i := 0; i < count; i++ {
			_, _ = c.Write([]byte(args[2])) // lost datagrams are the point
			time.Sleep(5 * time.Millisecond)
		}
		return 0
	case len(args) == 2 && args[0] == "exit":
		code, err := strconv.Atoi(args[1])
		if err != nil {
			return fail(err)
		}
		return code
	}
	return fail(fmt.Errorf("bad helper arguments %q", args))
}

// helperServe runs until killed; its goroutines end with the process.
func helperServe(port int) int {
	echo, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	query, err := net.Listen("tcp", fmt.Sprintf(":%d", port+1))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	pc, err := net.ListenPacket("udp", fmt.Sprintf(":%d", port))
	if err != nil {
		fmt.Println("ERR", err)
		return 1
	}
	var mu sync.Mutex
	counts := map[string]int{}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			mu.Lock()
			counts[string(buf[:n])]++
			mu.Unlock()
		}
	}()
	go func() {
		for {
			c, err := query.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				tag, err := bufio.NewReader(c).ReadString('\n')
				if err != nil {
					return
				}
				mu.Lock()
				n := counts[strings.TrimSpace(tag)]
				mu.Unlock()
				fmt.Fprintln(c, n)
			}()
		}
	}()
	fmt.Println("READY")
	for {
		c, err := echo.Accept()
		if err != nil {
			return 1
		}
		go func() {
			defer c.Close()
			_, _ = io.Copy(c, c)
		}()
	}
}

// dialEcho connects to an echo server, measures the minimum of 5 one-byte
// round trips, then echoes n bytes and checks them.
func dialEcho(addr string, n int, timeout time.Duration) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		return 0, err
	}
	rtt := time.Duration(1<<63 - 1)
	b := make([]byte, 1)
	for i := 0; i < 5; i++ {
		start := time.Now()
		if _, err := c.Write([]byte{byte(i)}); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return 0, err
		}
		if d := time.Since(start); d < rtt {
			rtt = d
		}
	}
	if n > 0 {
		payload := make([]byte, n)
		for i := range payload {
			payload[i] = byte(i * 7)
		}
		werr := make(chan error, 1)
		go func() { _, err := c.Write(payload); werr <- err }()
		got := make([]byte, n)
		_, rerr := io.ReadFull(c, got)
		if err := errors.Join(<-werr, rerr); err != nil {
			return 0, fmt.Errorf("echoing %d bytes: %w", n, err)
		}
		if !bytes.Equal(got, payload) {
			return 0, fmt.Errorf("echo of %d bytes came back corrupted", n)
		}
	}
	return rtt, nil
}

// waitReady waits until the helper p printed READY.
func waitReady(t *testing.T, p *Proc) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(p.LogPath())
		if bytes.Contains(b, []byte("\nREADY\n")) {
			return
		}
		if p.Exited() {
			t.Fatalf("helper exited (%v):\n%s", p.ExitErr(), b)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("helper not ready within 15s:\n%s", p.LogTail(50))
}

// dialFrom runs the dial helper inside zone and returns the RTT it measured.
func dialFrom(t *testing.T, z *Zones, zone Zone, addr string, n int, timeout time.Duration) (time.Duration, error) {
	t.Helper()
	bin, args := helper(t, "dial", addr, strconv.Itoa(n), strconv.Itoa(int(timeout.Milliseconds())))
	out, err := z.Exec(timeout+10*time.Second, zone, bin, args...)
	if err != nil {
		return 0, fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
	}
	for _, line := range strings.Split(string(out), "\n") {
		if ns, ok := strings.CutPrefix(line, "RTT "); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(ns), 10, 64)
			return time.Duration(v), err
		}
	}
	return 0, fmt.Errorf("no RTT in helper output: %s", out)
}

func mustDialFrom(t *testing.T, z *Zones, zone Zone, addr string, n int) time.Duration {
	t.Helper()
	rtt, err := dialFrom(t, z, zone, addr, n, 10*time.Second)
	if err != nil {
		t.Fatalf("zone %v -> %s: %v", zone, addr, err)
	}
	return rtt
}

func mustNotDialFrom(t *testing.T, z *Zones, zone Zone, addr string) {
	t.Helper()
	if _, err := dialFrom(t, z, zone, addr, 0, 500*time.Millisecond); err == nil {
		t.Fatalf("zone %v -> %s: connected; want the link to be cut", zone, addr)
	}
}

func mustDialRoot(t *testing.T, addr string) time.Duration {
	t.Helper()
	rtt, err := dialEcho(addr, 64<<10, 10*time.Second)
	if err != nil {
		t.Fatalf("root -> %s: %v", addr, err)
	}
	return rtt
}

// udpFrom sends count datagrams tagged tag from zone to addr.
func udpFrom(t *testing.T, z *Zones, zone Zone, addr, tag string, count int) {
	t.Helper()
	bin, args := helper(t, "udp", addr, tag, strconv.Itoa(count))
	if out, err := z.Exec(30*time.Second, zone, bin, args...); err != nil {
		t.Fatalf("udp from zone %v: %v: %s", zone, err, out)
	}
}

// awaitReceived waits until the helper server at queryAddr has received
// a datagram tagged tag, and fails with msg if none comes within 10s.
func awaitReceived(t *testing.T, queryAddr, tag, msg string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); received(t, queryAddr, tag) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal(msg)
		}
	}
}

// received asks the helper server at queryAddr how many datagrams it got
// with tag.
func received(t *testing.T, queryAddr, tag string) int {
	t.Helper()
	c, err := net.DialTimeout("tcp", queryAddr, 5*time.Second)
	if err != nil {
		t.Fatalf("query %s: %v", queryAddr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintln(c, tag)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("query %s: %v", queryAddr, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("query %s: %q", queryAddr, line)
	}
	return n
}

// shaping lists what delays or drops frames between the zones and on the
// client links: each interface (namespace/device) with a netem qdisc, and
// "forwarder" while the userspace forwarder carries the replication link.
func shaping(t *testing.T, z *Zones) []string {
	t.Helper()
	var out []string
	check := func(ns, dev string) {
		args := []string{"qdisc", "show", "dev", dev}
		if ns != "" {
			args = append([]string{"-n", ns}, args...)
		}
		b, err := exec.Command("tc", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %s: %v: %s", strings.Join(args, " "), err, b)
		}
		if bytes.Contains(b, []byte("netem")) {
			out = append(out, ns+"/"+dev)
		}
	}
	for i := range 2 {
		check(z.ns[i], ReplIface)
		check(z.ns[i], ClientIface)
		check("", z.hostIf[i])
	}
	z.mu.Lock()
	if z.fwd != nil {
		out = append(out, "forwarder")
	}
	z.mu.Unlock()
	return out
}

// shapedRepl is what shaping reports while both directions of the
// replication link are delayed.
func shapedRepl(z *Zones) []string {
	if z.Shaper() == ShaperUserspace {
		return []string{"forwarder"}
	}
	return []string{z.ns[0] + "/" + ReplIface, z.ns[1] + "/" + ReplIface}
}

func replAddr(z *Zones, zone Zone, port int) string {
	return net.JoinHostPort(z.ReplIP(zone), strconv.Itoa(port))
}

// TestZonesNetwork checks the topology, every fault, and that cleanup
// leaves nothing behind.
func TestZonesNetwork(t *testing.T) {
	const port = 7000
	var names, hostIfs []string
	t.Run("zones", func(t *testing.T) {
		z := NewZones(t)
		names, hostIfs = z.Namespaces(), z.HostInterfaces()
		t.Logf("namespaces %v, subnet %d, shaper %s", names, z.Subnet(), z.Shaper())
		for _, zone := range []Zone{ZoneA, ZoneB} {
			bin, args := helper(t, "serve", strconv.Itoa(port))
			waitReady(t, z.StartInZone(zone, bin, args...))
		}

		// Baseline: the test reaches both client links; the zones reach
		// each other over the replication link, with bulk data too (GSO
		// frames on the veths).
		for _, zone := range []Zone{ZoneA, ZoneB} {
			mustDialRoot(t, z.ClientAddr(zone, port))
		}
		base := mustDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port), 4<<20)
		mustDialFrom(t, z, ZoneB, replAddr(z, ZoneA, port), 4<<20)
		t.Logf("baseline replication RTT %v", base)

		// Isolation: a zone has no route to the other zone's client link,
		// so zone-to-zone traffic can only use the replication link.
		if _, err := dialFrom(t, z, ZoneA, z.ClientAddr(ZoneB, port), 0, 500*time.Millisecond); err == nil {
			t.Fatal("zone a reached zone b's client address")
		}

		t.Run("LinkDownBoth", func(t *testing.T) {
			z.LinkDownBoth()
			mustNotDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port))
			mustNotDialFrom(t, z, ZoneB, replAddr(z, ZoneA, port))
			for _, zone := range []Zone{ZoneA, ZoneB} {
				mustDialRoot(t, z.ClientAddr(zone, port)) // client links unaffected
			}
			z.LinkUp()
			mustDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port), 64<<10)
			mustDialFrom(t, z, ZoneB, replAddr(z, ZoneA, port), 64<<10)
		})

		t.Run("LinkDownOneWay", func(t *testing.T) {
			z.LinkDown(ZoneA, ZoneB)
			if f := z.Faults(); !f[ZoneA].Down || f[ZoneB].Down {
				t.Fatalf("faults %+v; want only a->b down", f)
			}
			udpFrom(t, z, ZoneB, replAddr(z, ZoneA, port), "b2a", 20)
			udpFrom(t, z, ZoneA, replAddr(z, ZoneB, port), "a2b", 20)
			awaitReceived(t, z.ClientAddr(ZoneA, port+1), "b2a", "b -> a datagrams lost while only a -> b is down")
			// TCP needs both directions.
			mustNotDialFrom(t, z, ZoneB, replAddr(z, ZoneA, port))
			z.LinkUp()
			udpFrom(t, z, ZoneA, replAddr(z, ZoneB, port), "a2b-up", 20)
			awaitReceived(t, z.ClientAddr(ZoneB, port+1), "a2b-up", "a -> b datagrams lost after LinkUp")
			// The datagrams sent after LinkUp took the same path after the
			// others: any of those that got through has arrived by now.
			if n := received(t, z.ClientAddr(ZoneB, port+1), "a2b"); n != 0 {
				t.Fatalf("%d a -> b datagrams arrived while a -> b is down", n)
			}
		})

		t.Run("Netem", func(t *testing.T) {
			const delay = 100 * time.Millisecond
			z.Netem(delay, 0)
			rtt := mustDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port), 256<<10)
			if rtt < 2*delay {
				t.Fatalf("replication RTT %v with %v each way; want >= %v", rtt, delay, 2*delay)
			}
			// The client links are not delayed: no shaping sits on
			// their path (an RTT upper bound would only measure the
			// machine's load).
			mustDialRoot(t, z.ClientAddr(ZoneA, port))
			if got := shaping(t, z); !slices.Equal(got, shapedRepl(z)) {
				t.Fatalf("shaping on %v under a replication delay; want only %v", got, shapedRepl(z))
			}
			z.NetemOneWay(ZoneB, 0, 0) // only a -> b delayed now
			if rtt := mustDialFrom(t, z, ZoneB, replAddr(z, ZoneA, port), 0); rtt < delay {
				t.Fatalf("RTT %v with %v one way; want >= %v", rtt, delay, delay)
			}
			z.ClearNetem()
			mustDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port), 0)
			if got := shaping(t, z); len(got) != 0 {
				t.Fatalf("shaping left on %v after ClearNetem", got)
			}
			z.Netem(0, 100)
			mustNotDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port))
			z.ClearNetem()
			mustDialFrom(t, z, ZoneA, replAddr(z, ZoneB, port), 64<<10)
			if f := z.Faults(); f != [2]Fault{} {
				t.Fatalf("faults %+v after ClearNetem; want none", f)
			}
		})
	})
	if len(names) == 0 {
		t.Skip("the fixture was skipped")
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	for _, n := range names {
		if strings.Contains(string(out), n) {
			t.Errorf("namespace %s still listed after cleanup:\n%s", n, out)
		}
	}
	for _, h := range hostIfs {
		if _, err := net.InterfaceByName(h); err == nil {
			t.Errorf("root interface %s still present after cleanup", h)
		}
	}
}

// TestZonesProcessControl checks Proc: the pid is the binary's own and runs
// in the zone's namespace; Stop/Cont freeze and resume it; Kill9, Term and
// Wait.
func TestZonesProcessControl(t *testing.T) {
	const port = 7100
	z := NewZones(t)
	bin, args := helper(t, "serve", strconv.Itoa(port))
	p := z.StartInZone(ZoneA, bin, args...)
	waitReady(t, p)

	// ip netns exec execs the binary: the pid is the helper itself, and it
	// lives in zone a's namespace.
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid())); err != nil || exe != bin {
		t.Fatalf("/proc/%d/exe = %q, %v; want %q", p.Pid(), exe, err, bin)
	}
	var want syscall.Stat_t
	if err := syscall.Stat(filepath.Join(netnsDir, z.Namespace(ZoneA)), &want); err != nil {
		t.Fatal(err)
	}
	if link, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", p.Pid())); err != nil || link != fmt.Sprintf("net:[%d]", want.Ino) {
		t.Fatalf("/proc/%d/ns/net = %q, %v; want net:[%d]", p.Pid(), link, err, want.Ino)
	}
	if err := p.Wait(50 * time.Millisecond); !errors.Is(err, ErrStillRunning) {
		t.Fatalf("Wait on a running process = %v; want ErrStillRunning", err)
	}

	// Stop: the kernel still accepts the connection, but nothing echoes.
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, p.Pid(), "T")
	if _, err := dialEcho(z.ClientAddr(ZoneA, port), 0, 300*time.Millisecond); err == nil {
		t.Fatal("a stopped process answered")
	}
	if err := p.Cont(); err != nil {
		t.Fatal(err)
	}
	mustDialRoot(t, z.ClientAddr(ZoneA, port))

	p.Kill9()
	if !p.Exited() {
		t.Fatal("not exited after Kill9")
	}
	var ee *exec.ExitError
	if err := p.ExitErr(); !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("exit after Kill9: %v; want killed by SIGKILL", err)
	}
	if err := p.Stop(); !errors.Is(err, os.ErrProcessDone) {
		t.Fatalf("Stop after exit = %v; want ErrProcessDone", err)
	}

	// Term works on a stopped process too (SIGTERM, then SIGCONT).
	q := z.StartInZone(ZoneB, bin, args...)
	waitReady(t, q)
	if err := q.Stop(); err != nil {
		t.Fatal(err)
	}
	waitState(t, q.Pid(), "T")
	if err := q.Term(); err != nil {
		t.Fatalf("Term: %v", err)
	}
	if !q.Exited() {
		t.Fatal("not exited after Term")
	}

	// Exit status through Wait.
	xbin, xargs := helper(t, "exit", "3")
	x := z.StartInZone(ZoneB, xbin, xargs...)
	if err := x.Wait(30 * time.Second); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Fatalf("Wait = %v; want exit status 3", err)
	}
}

// waitState waits until /proc/<pid>/stat shows state.
func waitState(t *testing.T, pid int, state string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+1:])); len(f) > 0 && f[0] == state {
			return
		}
	}
	t.Fatalf("process %d never reached state %s", pid, state)
}

// TestSweepStaleNetns: namespaces of dead owners (pid gone, pid reused by a
// process that started at another time, or a zombie) are removed; those of live
// owners and names that are not ours are kept.
func TestSweepStaleNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		skipOrFail(t, "network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		skipOrFail(t, "network namespaces need iproute2 (ip)")
	}
	self, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	initStart, err := procStart(1)
	if err != nil {
		t.Fatal(err)
	}
	// A child that exited and is not reaped yet: a zombie owner.
	zombie := exec.Command("true")
	if err := zombie.Start(); err != nil {
		t.Fatal(err)
	}
	defer zombie.Wait()
	waitState(t, zombie.Process.Pid, "Z")
	zombieStart, err := procStart(zombie.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	ofZombie := fmt.Sprintf("%s%d-%d-5eed-a", NetnsPrefix, zombie.Process.Pid, zombieStart)
	dead := NetnsPrefix + "999999999-1-5eed-a" // above any pid_max
	reused := fmt.Sprintf("%s1-%d-5eed-a", NetnsPrefix, initStart+1)
	live := fmt.Sprintf("%s%d-%d-5eed-a", NetnsPrefix, os.Getpid(), self)
	foreign := NetnsPrefix + "not-a-fixture"
	all := []string{dead, reused, ofZombie, live, foreign}
	t.Cleanup(func() {
		for _, n := range all {
			_ = deleteNetns(n)
		}
	})
	for _, n := range all {
		if out, err := exec.Command("ip", "netns", "add", n).CombinedOutput(); err != nil {
			skipOrFail(t, fmt.Sprintf("ip netns add: %v: %s", err, out))
		}
	}
	removed, err := SweepStaleNetns()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("removed %v", removed)
	exists := func(n string) bool {
		_, err := os.Stat(filepath.Join(netnsDir, n))
		return err == nil
	}
	// Another package's sweeper may have removed the stale ones first; what
	// matters is that they are gone and the others are not.
	for _, n := range []string{dead, reused, ofZombie} {
		if exists(n) {
			t.Errorf("stale namespace %s survived the sweep", n)
		}
	}
	for _, n := range []string{live, foreign} {
		if !exists(n) {
			t.Errorf("namespace %s was swept; its owner is alive or it is not a fixture's", n)
		}
	}
}

// TestNetemArgs pins the tc command lines of the netem shaper, which kernels
// without sch_netem (where the userspace shaper runs) cannot exercise.
func TestNetemArgs(t *testing.T) {
	const pre = "-n ns qdisc replace dev repl root netem limit 100000"
	for _, tc := range []struct {
		f    Fault
		want string
	}{
		{Fault{Down: true}, pre + " loss 100%"},
		{Fault{Down: true, Delay: time.Second, Loss: 5}, pre + " loss 100%"},
		{Fault{Delay: 20 * time.Millisecond}, pre + " delay 20000us"},
		{Fault{Loss: 2.5}, pre + " loss 2.5%"},
		{Fault{Delay: 1500 * time.Microsecond, Loss: 100}, pre + " delay 1500us loss 100%"},
		{Fault{Delay: 5 * time.Millisecond, Reorder: 25}, pre + " delay 5000us reorder 25%"},
		{Fault{Reorder: 25}, pre},
	} {
		if got := strings.Join(netemArgs("ns", tc.f), " "); got != tc.want {
			t.Errorf("netemArgs(%+v) = %q; want %q", tc.f, got, tc.want)
		}
	}
}
