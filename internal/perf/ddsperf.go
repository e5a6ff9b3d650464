package perf

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Ddsperf runs Cyclone's ddsperf in a Pair's namespaces.
type Ddsperf struct {
	Bin    string // path of ddsperf
	Pair   *Pair
	Domain uint32
	// XMLA and XMLB are the Cyclone configurations of the responder's and
	// pinger's side (the same ones dyad's ends use).
	XMLA, XMLB string
}

func (d Ddsperf) cmd(ctx context.Context, ns, xml string, args ...string) *exec.Cmd {
	a := append([]string{"netns", "exec", ns, d.Bin, "-i", fmt.Sprint(d.Domain)}, args...)
	c := exec.CommandContext(ctx, "ip", a...)
	c.Env = append(os.Environ(), "CYCLONEDDS_URI="+xml)
	c.WaitDelay = 2 * time.Second
	return c
}

// ddsperf ping prints one line per second and peer, e.g.
//
//	[1776] 2.000  vm:1775 size 64 mean 44.1us min 17.8us 50% 29.4us 90% 81.9us 99% 151.9us max 1103.2us cnt 11284
var pingLine = regexp.MustCompile(`size (\d+) mean ([\d.]+)us min ([\d.]+)us 50% ([\d.]+)us 90% ([\d.]+)us 99% ([\d.]+)us max ([\d.]+)us cnt (\d+)`)

// ddsperf sub prints one line per second, e.g.
//
//	[1804] 3.000  size 1024 total 437758 lost 0 delta 129898 lost 0 rate 129.96 kS/s 1064.67 Mb/s (...)
var subLine = regexp.MustCompile(`size (\d+) total (\d+) lost (\d+) delta (\d+) lost (\d+) rate ([\d.]+) kS/s ([\d.]+) Mb/s`)

func us(s string) time.Duration {
	f, _ := strconv.ParseFloat(s, 64)
	return time.Duration(f * float64(time.Microsecond))
}

// ParsePing summarises ddsperf ping output as round trips. ddsperf
// prints half of each round trip (it records (now − the ping's source
// timestamp) / 2, a one-way estimate), so every figure is doubled: with
// the zones 2 ms apart each way it prints about 2 ms, not 4. ddsperf only
// reports per-second intervals, so the percentiles are the count-weighted
// mean of the intervals' percentiles (max is the overall max); the first
// interval (discovery, warm-up) is dropped when there are others.
func ParsePing(out string) (RTT, error) {
	type iv struct {
		p50, p90, p99, max time.Duration
		n                  int
	}
	var ivs []iv
	for _, l := range strings.Split(out, "\n") {
		m := pingLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n, _ := strconv.Atoi(m[8])
		if n == 0 {
			continue
		}
		ivs = append(ivs, iv{2 * us(m[4]), 2 * us(m[5]), 2 * us(m[6]), 2 * us(m[7]), n})
	}
	if len(ivs) == 0 {
		return RTT{}, fmt.Errorf("ddsperf ping: no result lines in output:\n%s", lastLines(out, 5))
	}
	if len(ivs) > 1 {
		ivs = ivs[1:]
	}
	var r RTT
	var w50, w90, w99 float64
	for _, x := range ivs {
		r.Count += x.n
		w50 += float64(x.p50) * float64(x.n)
		w90 += float64(x.p90) * float64(x.n)
		w99 += float64(x.p99) * float64(x.n)
		r.Max = max(r.Max, x.max)
	}
	n := float64(r.Count)
	r.P50, r.P90, r.P99 = time.Duration(w50/n), time.Duration(w90/n), time.Duration(w99/n)
	return r, nil
}

// ParseSub returns ddsperf sub's steady rate, and an error if ddsperf
// reported lost samples (it must not with KEEP_ALL). ddsperf prints one
// line per second; the first and the last second with data are partial
// (discovery, the publisher stopping), so with three or more the rate is
// the mean of the ones between, as dyad's rows are a whole phase's mean
// (the best second alone overstated ddsperf against them); with fewer it
// is the best second.
func ParseSub(out string) (Tput, error) {
	var t Tput
	var ks, mb []float64
	for _, l := range strings.Split(out, "\n") {
		m := subLine.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if m[3] != "0" {
			return t, fmt.Errorf("ddsperf sub reported %s lost samples", m[3])
		}
		delta, _ := strconv.Atoi(m[4])
		if delta == 0 {
			continue
		}
		k, _ := strconv.ParseFloat(m[6], 64)
		b, _ := strconv.ParseFloat(m[7], 64)
		ks, mb = append(ks, k), append(mb, b)
		total, _ := strconv.Atoi(m[2])
		t.Count = max(t.Count, total)
	}
	if len(ks) == 0 {
		return t, fmt.Errorf("ddsperf sub: no data in output:\n%s", lastLines(out, 5))
	}
	if len(ks) >= 3 {
		ks, mb = ks[1:len(ks)-1], mb[1:len(mb)-1]
		var sk, sm float64
		for i := range ks {
			sk, sm = sk+ks[i], sm+mb[i]
		}
		n := float64(len(ks))
		t.Rate, t.MBps = sk/n*1000, sm/n/8
		return t, nil
	}
	for i := range ks {
		if ks[i]*1000 > t.Rate {
			t.Rate, t.MBps = ks[i]*1000, mb[i]/8
		}
	}
	return t, nil
}

// Ping runs ddsperf pong in namespace A and ddsperf ping (size bytes,
// waitset, i.e. its fastest receive path) in namespace B for dur.
func (d Ddsperf) Ping(ctx context.Context, size int, dur time.Duration) (RTT, error) {
	secs := int((dur+time.Second-1)/time.Second) + 1 // +1: first interval dropped
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+20)*time.Second)
	defer cancel()
	pong := d.cmd(ctx, d.Pair.NsA, d.XMLA, "-D", fmt.Sprint(secs+4), "pong", "waitset")
	if err := pong.Start(); err != nil {
		return RTT{}, err
	}
	defer func() { pong.Process.Kill(); pong.Wait() }()
	out, err := d.cmd(ctx, d.Pair.NsB, d.XMLB, "-D", fmt.Sprint(secs), "ping", "size", fmt.Sprint(size), "waitset").CombinedOutput()
	if err != nil {
		return RTT{}, fmt.Errorf("ddsperf ping: %v\n%s", err, lastLines(string(out), 5))
	}
	return ParsePing(string(out))
}

// PubSub runs ddsperf sub in namespace A and pub (KEEP_ALL, reliable, as
// replication uses) in namespace B for dur.
func (d Ddsperf) PubSub(ctx context.Context, size int, dur time.Duration) (Tput, error) {
	secs := int((dur + time.Second - 1) / time.Second)
	ctx, cancel := context.WithTimeout(ctx, time.Duration(secs+20)*time.Second)
	defer cancel()
	sub := d.cmd(ctx, d.Pair.NsA, d.XMLA, "-k", "all", "-D", fmt.Sprint(secs+3), "sub", "waitset")
	var out strings.Builder
	sub.Stdout, sub.Stderr = &out, &out
	if err := sub.Start(); err != nil {
		return Tput{}, err
	}
	pubOut, err := d.cmd(ctx, d.Pair.NsB, d.XMLB, "-k", "all", "-D", fmt.Sprint(secs), "pub", "size", fmt.Sprint(size)).CombinedOutput()
	werr := sub.Wait()
	if err != nil {
		return Tput{}, fmt.Errorf("ddsperf pub: %v\n%s", err, lastLines(string(pubOut), 5))
	}
	if werr != nil && out.Len() == 0 {
		return Tput{}, fmt.Errorf("ddsperf sub: %v", werr)
	}
	return ParseSub(out.String())
}

func lastLines(s string, n int) string {
	var l []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		l = append(l, sc.Text())
	}
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
