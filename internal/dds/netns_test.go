package dds

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/testenv"
)

// vethPair is two network namespaces joined by a veth pair with private
// test addresses; everything is removed in t.Cleanup (even on failure).
type vethPair struct {
	nsA, nsB     string
	ifA, ifB     string
	addrA, addrB string
}

func run(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func newVethPair(t *testing.T) *vethPair {
	t.Helper()
	testenv.NeedRoot(t, "for network namespaces")
	testenv.NeedCommand(t, "ip", "iproute2")
	id := os.Getpid() % 100000
	sub := os.Getpid()%200 + 20
	v := &vethPair{
		nsA: fmt.Sprintf("dyadtest-%d-a", id), nsB: fmt.Sprintf("dyadtest-%d-b", id),
		ifA: fmt.Sprintf("dyv%da", id), ifB: fmt.Sprintf("dyv%db", id),
		addrA: fmt.Sprintf("10.99.%d.1", sub), addrB: fmt.Sprintf("10.99.%d.2", sub),
	}
	t.Cleanup(func() {
		// Deleting a namespace deletes the veth end inside it; the link
		// delete covers a failure between "link add" and the move.
		exec.Command("ip", "netns", "del", v.nsA).Run()
		exec.Command("ip", "netns", "del", v.nsB).Run()
		exec.Command("ip", "link", "del", v.ifA).Run()
	})
	run(t, "ip", "netns", "add", v.nsA)
	run(t, "ip", "netns", "add", v.nsB)
	run(t, "ip", "link", "add", v.ifA, "netns", v.nsA, "type", "veth", "peer", "name", v.ifB, "netns", v.nsB)
	run(t, "ip", "-n", v.nsA, "addr", "add", v.addrA+"/24", "dev", v.ifA)
	run(t, "ip", "-n", v.nsB, "addr", "add", v.addrB+"/24", "dev", v.ifB)
	for _, ns := range []string{v.nsA, v.nsB} {
		run(t, "ip", "-n", ns, "link", "set", "lo", "up")
	}
	run(t, "ip", "-n", v.nsA, "link", "set", v.ifA, "up")
	run(t, "ip", "-n", v.nsB, "link", "set", v.ifB, "up")
	return v
}

// configs returns unicast (multicast off) configurations for both ends.
func (v *vethPair) configs(domain uint32) (a, b Config) {
	a = Config{Domain: domain, Interface: v.ifA, Peers: []string{v.addrB}, LeaseDuration: time.Second}
	b = Config{Domain: domain, Interface: v.ifB, Peers: []string{v.addrA}, LeaseDuration: time.Second}
	return a, b
}

// TestNetnsUnicast: responder in namespace A, pinger in namespace B, unicast
// discovery over the veth pair; payloads must arrive intact.
func TestNetnsUnicast(t *testing.T) {
	v := newVethPair(t)
	ca, cb := v.configs(testDomain(t))
	resp := startHelper(t, v.nsA, "respond", helperJob{Cfg: ca})
	if s := resp.line(t, 10*time.Second); s != "ready" {
		t.Fatalf("responder: %q", s)
	}
	sizes := []int{0, 64, 1024, 16384, 65536}
	ping := startHelper(t, v.nsB, "ping", helperJob{
		Cfg: cb, Opt: PerfOptions{Verify: true}, Sizes: sizes, Count: 100,
		TputDur: 300 * time.Millisecond, TputSz: 1024,
	})
	res := ping.result(t, 60*time.Second)
	if len(res.Stats) != len(sizes) || res.Tput == nil || res.Tput.Count == 0 {
		t.Fatalf("incomplete result %+v", res)
	}
	for _, st := range res.Stats {
		t.Log(st)
	}
	t.Log(res.Tput)
}
