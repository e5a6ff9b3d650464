package dds

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestPerfNetns measures Go round trips and throughput over a veth pair
// beside ddsperf on the same pair and the same Cyclone configuration. It
// only runs with DYAD_DDS_PERF=1 (and root):
//
//	DYAD_DDS_PERF=1 go test -run TestPerfNetns -v ./internal/dds
func TestPerfNetns(t *testing.T) {
	if os.Getenv("DYAD_DDS_PERF") == "" {
		t.Skip("set DYAD_DDS_PERF=1 to measure")
	}
	v := newVethPair(t)
	dom := testDomain(t)
	ca, cb := v.configs(dom)
	sizes := []int{64, 1024, 16384, 65536}
	count := 3000

	if _, err := exec.LookPath("ddsperf"); err == nil {
		for _, sz := range sizes {
			t.Logf("ddsperf ping size %d: %s", sz, ddsperfPing(t, v, ca, cb, sz))
		}
		t.Logf("ddsperf pub/sub 1KiB keep-all: %s", ddsperfTput(t, v, ca, cb))
	}
	for _, opt := range []PerfOptions{
		{Mode: ReceiveThread}, {Mode: ReceiveThread, Inline: true},
		{Mode: ReceiveListener}, {Mode: ReceiveListener, Inline: true},
	} {
		resp := startHelper(t, v.nsA, "respond", helperJob{Cfg: ca, Opt: opt})
		if s := resp.line(t, 10*time.Second); s != "ready" {
			t.Fatalf("responder: %q", s)
		}
		ping := startHelper(t, v.nsB, "ping", helperJob{Cfg: cb, Opt: opt, Sizes: sizes, Count: count, TputDur: 3 * time.Second, TputSz: 1024})
		res := ping.result(t, 3*time.Minute)
		resp.stop()
		for _, st := range res.Stats {
			t.Logf("go mode=%d inline=%v %v", opt.Mode, opt.Inline, st)
		}
		t.Logf("go mode=%d inline=%v throughput %v", opt.Mode, opt.Inline, res.Tput)
	}
}

func ddsperfEnv(c Config) []string {
	return append(os.Environ(), "CYCLONEDDS_URI="+c.XML())
}

func ddsperfPing(t *testing.T, v *vethPair, ca, cb Config, size int) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dom := fmt.Sprint(ca.Domain)
	pong := exec.CommandContext(ctx, "ip", "netns", "exec", v.nsA, "ddsperf", "-i", dom, "-D", "8", "pong", "waitset")
	pong.Env = ddsperfEnv(ca)
	if err := pong.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { pong.Process.Kill(); pong.Wait() }()
	ping := exec.CommandContext(ctx, "ip", "netns", "exec", v.nsB, "ddsperf", "-i", dom, "-D", "5", "ping", "size", fmt.Sprint(size), "waitset")
	ping.Env = ddsperfEnv(cb)
	out, err := ping.CombinedOutput()
	if err != nil {
		t.Logf("ddsperf ping: %v\n%s", err, out)
	}
	return lastLines(string(out), 2)
}

func ddsperfTput(t *testing.T, v *vethPair, ca, cb Config) string {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dom := fmt.Sprint(ca.Domain)
	sub := exec.CommandContext(ctx, "ip", "netns", "exec", v.nsA, "ddsperf", "-i", dom, "-k", "all", "-D", "7", "sub", "waitset")
	sub.Env = ddsperfEnv(ca)
	var out strings.Builder
	sub.Stdout, sub.Stderr = &out, &out
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	pub := exec.CommandContext(ctx, "ip", "netns", "exec", v.nsB, "ddsperf", "-i", dom, "-k", "all", "-D", "5", "pub", "size", "1k")
	pub.Env = ddsperfEnv(cb)
	pub.Run()
	sub.Wait()
	return lastLines(out.String(), 4)
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
