package dds

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/perf"
)

// TestPerfNetns measures Go round trips and throughput over a veth pair
// beside ddsperf on the same pair and the same Cyclone configuration. It
// only runs with DYAD_DDS_PERF=1 (and root):
//
//	DYAD_DDS_PERF=1 go test -run TestPerfNetns -v ./internal/dds
//
// It logs the figures and the Go ÷ ddsperf ratios but asserts only what
// they rest on: every round trip of every size completed with ordered
// percentiles, the throughput phase delivered every sample it sent, and
// ddsperf (when installed) produced parseable
// results with no lost samples, so every ratio has non-zero terms. How fast
// is for `dyad perf` and its report, not for a test.
func TestPerfNetns(t *testing.T) {
	if os.Getenv("DYAD_DDS_PERF") == "" {
		t.Skip("set DYAD_DDS_PERF=1 to measure")
	}
	v := newVethPair(t)
	dom := testDomain(t)
	ca, cb := v.configs(dom)
	sizes := []int{64, 1024, 16384, 65536}
	count := 3000

	base := map[int]time.Duration{} // ddsperf p50 by size
	if _, err := exec.LookPath("ddsperf"); err == nil {
		for _, sz := range sizes {
			out := ddsperfPing(t, v, ca, cb, sz)
			t.Logf("ddsperf ping size %d: %s", sz, lastLines(out, 2))
			rtt, err := perf.ParsePing(out)
			if err != nil {
				t.Fatalf("ddsperf ping size %d: %v", sz, err)
			}
			if rtt.Count == 0 || rtt.P50 <= 0 || rtt.P99 < rtt.P50 {
				t.Fatalf("ddsperf ping size %d: summary %+v", sz, rtt)
			}
			base[sz] = rtt.P50
		}
		out := ddsperfTput(t, v, ca, cb)
		t.Logf("ddsperf pub/sub 1KiB keep-all: %s", lastLines(out, 4))
		if tp, err := perf.ParseSub(out); err != nil || tp.Rate <= 0 {
			t.Fatalf("ddsperf pub/sub: %+v, %v", tp, err)
		}
	}
	for _, opt := range []PerfOptions{
		{Mode: ReceiveThread}, {Mode: ReceiveThread, Inline: true},
		{Mode: ReceiveListener}, {Mode: ReceiveListener, Inline: true},
		{Mode: ReceiveWaitSet},
	} {
		resp := startHelper(t, v.nsA, "respond", helperJob{Cfg: ca, Opt: opt})
		if s := resp.line(t, 10*time.Second); s != "ready" {
			t.Fatalf("responder: %q", s)
		}
		ping := startHelper(t, v.nsB, "ping", helperJob{Cfg: cb, Opt: opt, Sizes: sizes, Count: count, TputDur: 3 * time.Second, TputSz: 1024})
		res := ping.result(t, 3*time.Minute)
		resp.stop()
		name := fmt.Sprintf("go mode=%d inline=%v", opt.Mode, opt.Inline)
		if len(res.Stats) != len(sizes) {
			t.Fatalf("%s: %d sizes measured, want %d", name, len(res.Stats), len(sizes))
		}
		for i, st := range res.Stats {
			t.Logf("%s %v", name, st)
			if st.Size != sizes[i] || st.Count != count {
				t.Errorf("%s: size %d: %d round trips of size %d, want %d", name, sizes[i], st.Count, st.Size, count)
			}
			if st.Min <= 0 || st.P50 < st.Min || st.P90 < st.P50 || st.P99 < st.P90 || st.Max < st.P99 || st.Elapsed <= 0 {
				t.Errorf("%s: size %d: percentiles out of order or zero: %v", name, sizes[i], st)
			}
			if b := base[st.Size]; b > 0 && st.P50 > 0 {
				t.Logf("%s size %d: p50 ÷ ddsperf %.2f", name, st.Size, float64(st.P50)/float64(b))
			}
		}
		tp := res.Tput
		if tp == nil {
			t.Fatalf("%s: no throughput result", name)
		}
		t.Logf("%s throughput %v", name, *tp)
		// (Throughput itself fails unless the responder counted every
		// sample sent, which ping.result turns into a test failure.)
		if tp.Size != 1024 || tp.Count <= 0 || tp.Elapsed <= 0 || tp.Rate <= 0 || tp.MBps <= 0 {
			t.Errorf("%s: throughput not measured: %+v", name, *tp)
		}
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
	return string(out)
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
	return out.String()
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
