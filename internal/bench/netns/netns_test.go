package netns

import (
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/shaper"
	"github.com/dyad-db/dyad/internal/testenv"
)

// TestDelayedZones builds three zones 2 ms apart and checks that every
// pair of zones reaches the other through the shaper's hub, and that each
// round trip between two zones takes at least the delay there and back.
func TestDelayedZones(t *testing.T) {
	testenv.NeedRoot(t, "network namespaces")
	testenv.NeedCommand(t, "ip", "iproute2")
	const delay = 2 * time.Millisecond
	p, err := NewWith(Options{Zones: 3, Delay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	if p.Zones() != 3 || !p.Shaped() || p.Delay() != delay {
		t.Fatalf("zones %d, shaped %v, delay %v", p.Zones(), p.Shaped(), p.Delay())
	}
	for _, link := range [][2]int{{0, 1}, {0, 2}, {2, 1}} {
		rtt := udpRoundTrip(t, p, link[0], link[1])
		t.Logf("zone %c → %c: fastest round trip %v", 'a'+link[0], 'a'+link[1], rtt)
		if rtt < 2*delay {
			t.Errorf("zone %c → %c: round trip %v, below twice the one-way delay %v", 'a'+link[0], 'a'+link[1], rtt, delay)
		}
	}
	// Close removes every namespace, the hub's included.
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range append(p.ns, p.mid) {
		if slices.Contains(strings.Fields(string(out)), ns) {
			t.Errorf("namespace %s left after Close", ns)
		}
	}
}

// udpRoundTrip echoes UDP datagrams from zone from to zone to over the
// replication subnet and returns the fastest of a few round trips.
func udpRoundTrip(t *testing.T, p *Pair, from, to int) time.Duration {
	t.Helper()
	listen := func(z int, addr string) net.PacketConn {
		var c net.PacketConn
		err := shaper.InNetns(p.Namespace(z), func() error {
			var err error
			c, err = net.ListenPacket("udp4", addr)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	srv := listen(to, p.ReplIP(to)+":0")
	done := make(chan struct{})
	go func() { // owned by this function: ends when srv is closed below
		defer close(done)
		buf := make([]byte, 64)
		for {
			n, addr, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteTo(buf[:n], addr)
		}
	}()
	defer func() { srv.Close(); <-done }()
	cli := listen(from, p.ReplIP(from)+":0")
	defer cli.Close()
	best := time.Duration(-1)
	buf := make([]byte, 64)
	for i := range 8 {
		msg := []byte(fmt.Sprintf("ping %d", i))
		start := time.Now()
		if _, err := cli.WriteTo(msg, srv.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		// The first datagram may wait for ARP; a lost one is sent again.
		_ = cli.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _, err := cli.ReadFrom(buf)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(buf[:n]) != string(msg) {
			continue // a late echo of an earlier round
		}
		if rtt := time.Since(start); best < 0 || rtt < best {
			best = rtt
		}
	}
	if best < 0 {
		t.Fatalf("zone %c → %c: no echo", 'a'+from, 'a'+to)
	}
	return best
}
