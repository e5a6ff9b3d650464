package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/bench/workload"
	"github.com/dyad-db/dyad/internal/certs"
	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/perf"
)

// perfJob is what the parent hands a child `dyad perf --role ...` process
// (as JSON in --job): one end of one receive path.
type perfJob struct {
	Domain   uint32
	Iface    string
	Peer     string
	Security string // Cyclone <Security> element; empty: plain DDS
	ExtraXML string
	Inline   bool
	// WaitSet: the raw binding's ends wait in C on a waitset and answer
	// from the goroutine that waited (dds.ReceiveWaitSet); with Net,
	// ddsnet's owners wait in ddsnet's Wait (ddsnet.Config.WaitSet); with
	// Pair, the nodes' apply loops do (dyad serve --dds-waitset).
	WaitSet bool
	Net     bool // the replication path (ddsnet) instead of the raw binding
	Pair    bool // the whole path: two dyad nodes (internal/server over ddsnet)
	Sizes   []int
	Count   int
	TputDur time.Duration
	// Lock runs each end's writing goroutine locked to its OS thread
	// (runtime.LockOSThread): --lock-writers' A/B rows.
	Lock bool
	// WriteBatch turns on Cyclone's write batching (dds.Config.WriteBatch)
	// and makes the throughput phase send perfBurst messages per flush
	// (dds.PerfOptions.Burst, ddsnet.Net.SendAll): the +batch rows.
	WriteBatch bool
	// Profile, if set, is a directory each child writes a CPU profile of
	// its whole run into (<role>-<pid>.pprof; hidden flag --profile-dir).
	Profile string
}

// perfBurst is how many throughput messages a +batch row sends per flush:
// as many as a receive batch holds, about what one turn of a busy
// replication loop has to send.
const perfBurst = 64

func (j perfJob) config() dds.Config {
	return dds.Config{Domain: j.Domain, Interface: j.Iface, Peers: []string{j.Peer}, LeaseDuration: time.Second, SecurityXML: j.Security, ExtraXML: j.ExtraXML,
		WriteBatch: j.WriteBatch}
}

// perfPaths are dyad's receive paths measured by perf. "inline" handles
// each sample on Cyclone's receive thread (as ddsperf does); "channel"
// hands it to a Go goroutine through the reader's channel, which is how a
// protocol owner such as ddsnet's consumes samples.
// "waitset" is a Go goroutine that blocks in one cgo call on a waitset over
// its reader and a guard (no call into Go on Cyclone's thread, no Go
// scheduler wake-up on arrival) and answers from that same goroutine.
// "ddsnet" is the transport replication uses, fed to an owner goroutine
// that Cyclone's thread notifies (cmd/dyad/perf_ddsnet.go); "ddsnet+ws"
// is the same with ddsnet's Config.WaitSet (the owner waits in C;
// internal/ddsnet/waitset.go), as dyad serve feeds the replication loop.
// "pair" is the whole path: a Put on a primary replicated to its replica
// by the real server code over ddsnet (cmd/dyad/perf_pair.go); "+ws" as
// dyad serve runs it, without with --dds-waitset=false. A "+batch" row is
// its path with Cyclone's write batching and a flush per perfBurst
// messages in the throughput phase, as ddsperf's publisher batches (its
// round trips flush every write, so they are the path's own).
type perfPathSpec struct {
	name    string
	inline  bool
	waitset bool
	net     bool
	pair    bool
	lock    bool
	batch   bool
}

var perfPaths = []perfPathSpec{{name: "dyad-inline", inline: true}, {name: "dyad-inline+batch", inline: true, batch: true},
	{name: "dyad-channel"}, {name: "dyad-waitset", waitset: true},
	{name: "dyad-ddsnet", net: true}, {name: "dyad-ddsnet+batch", net: true, batch: true},
	{name: "dyad-ddsnet+ws", net: true, waitset: true}, {name: "dyad-ddsnet+ws+batch", net: true, waitset: true, batch: true},
	{name: "dyad-pair", pair: true}, {name: "dyad-pair+ws", pair: true, waitset: true}}

// perfLockedPaths are --lock-writers' extra rows: the goroutine paths
// again with each end's writing goroutine locked to its OS thread, in the
// same run as the unlocked rows (an A/B: only ratios within one run mean
// anything on a shared machine).
var perfLockedPaths = []perfPathSpec{{name: "dyad-channel+lock", lock: true}, {name: "dyad-ddsnet+lock", net: true, lock: true}}

func perfCmd() *cobra.Command {
	var (
		role, job, sizes, out, ddsConfig, ddsperfBin, systems, profile string
		count                                                          int
		tputDur, delay                                                 time.Duration
		domain                                                         uint32
		noTput, noLat, secure, lockWriters                             bool
	)
	cmd := &cobra.Command{
		Use:   "perf",
		Short: "Measure dyad's DDS transport beside Cyclone's ddsperf over a veth pair (needs root)",
		Long: `perf creates two network namespaces joined by a veth pair (removed at exit,
also on Ctrl-C), runs a responder and a pinger as separate dyad processes, one
per namespace, and measures for every sample size:

  - latency ping-pong: round-trip p50/p90/p99/max;
  - throughput: samples/s and MB/s, RELIABLE KEEP_ALL as replication uses;

for Cyclone's ddsperf (the baseline, same pair, same Cyclone configuration,
same run) and for dyad's receive paths: dyad-inline (sample handled
on Cyclone's receive thread, like ddsperf), dyad-channel (sample handed
to a Go goroutine, the way replication's owner goroutine consumes it),
dyad-waitset (a Go goroutine blocked in one cgo call on a waitset, as
ddsperf's waitset mode waits, answering from that goroutine),
dyad-ddsnet (internal/ddsnet, the transport replication uses, handing
batches to an owner goroutine that Cyclone's receive thread notifies: ping
as a Log message and pong as an Ack; throughput is Log messages per second
delivered to the peer's owner, counted there), dyad-ddsnet+ws (the same
with ddsnet's waitset consumer, as dyad serve feeds the replication loop:
the owner waits in C and takes on its own goroutine), and dyad-pair+ws
(the whole replication path as dyad serve runs it: two dyad nodes, the
real server code over ddsnet with fsync off, the loops waiting in C; a
round trip is one Put on the primary, applied and logged there, persisted
and acknowledged by the replica, answered; throughput is acknowledged
Puts per second of 16 concurrent writers) beside dyad-pair (the same with
--dds-waitset=false: the loops woken through Go). A further table
splits the pair's mean write into the primary's part, the ddsnet round
trip and the replica's part, and another splits the ddsnet round trip
(pings of 48 bytes or more, stamped by both ends on the host's clock)
into write (Send), deliver (to the peer's notification), wake (to its
consumer goroutine running), take (to the message in hand) and the
responder's turn, as means and as medians. A last one splits the pinger's
writes (dyad-inline, dyad-channel, dyad-waitset, dyad-ddsnet) into the caller's own work,
the cgo call, and dds_write's time on and off the CPU, stamped in C, with
the writing thread's context switches.
Ratios are dyad ÷ ddsperf at the same size. ddsperf's throughput is the mean
of its full seconds; its publisher batches writes into datagrams
(dds_write_set_batch), which dyad's writers do not.
--systems runs only the named systems (e.g. ddsperf,dyad-ddsnet) and
--no-latency only the throughput phase.

DDS Security: --secure makes a CA, an identity per end, and governance and
permissions documents (as "dyad certs" does, topics "*" so ddsperf's topics are
allowed too) and runs every system twice in the same run, plain and secured
("<system> +sec": authentication, encrypted discovery, liveliness, metadata and
data, access control); a second table gives secured ÷ plain. Any other
Cyclone configuration can still be passed with --dds-config.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if role != "" {
				var j perfJob
				if err := json.Unmarshal([]byte(job), &j); err != nil {
					return fmt.Errorf("perf: bad --job: %w", err)
				}
				return perfChild(ctx, role, j, cmd.OutOrStdout())
			}
			if delay > 0 {
				return errors.New("perf: --delay needs sch_netem, which this kernel lacks; a userspace delay relay is not implemented yet")
			}
			sz, err := parseSizes(sizes)
			if err != nil {
				return err
			}
			var extra string
			if ddsConfig != "" {
				b, err := os.ReadFile(ddsConfig)
				if err != nil {
					return err
				}
				extra = string(b)
			}
			if ddsperfBin == "" {
				ddsperfBin, _ = exec.LookPath("ddsperf")
			}
			if noTput && noLat {
				return errors.New("perf: --no-throughput and --no-latency leave nothing to measure")
			}
			return runPerf(ctx, cmd, perfRun{sizes: sz, count: count, tputDur: tputDur, domain: domain,
				extra: extra, ddsperf: ddsperfBin, out: out, noTput: noTput, noLat: noLat, secure: secure, lockWriters: lockWriters,
				systems: workload.SplitList(systems), profile: profile})
		},
	}
	f := cmd.Flags()
	f.StringVar(&sizes, "sizes", "64,256,1024,4096,16384,65536", "comma-separated sample sizes in bytes (k/K suffix = KiB)")
	f.IntVar(&count, "count", 5000, "round trips per size and system")
	f.DurationVar(&tputDur, "tput-duration", 3*time.Second, "throughput phase length per size and system")
	f.BoolVar(&noTput, "no-throughput", false, "skip the throughput phase")
	f.BoolVar(&noLat, "no-latency", false, "skip the round trips (ping-pong); measure throughput only")
	f.StringVar(&systems, "systems", "", "comma-separated systems to run (e.g. ddsperf,dyad-inline); default all")
	f.BoolVar(&secure, "secure", false, "also run every system with DDS Security and report secured ÷ plain")
	f.Uint32Var(&domain, "domain", 7, "DDS domain ID used inside the private namespaces")
	f.StringVar(&ddsConfig, "dds-config", "", "file with extra Cyclone XML inserted in <Domain> on both ends (e.g. a <Security> element for DDS Security)")
	f.StringVar(&ddsperfBin, "ddsperf", "", "path of Cyclone's ddsperf (default: from PATH; if absent the baseline is skipped)")
	f.StringVar(&out, "out", "", "directory for results.json, results.md and rtt.svg")
	f.DurationVar(&delay, "delay", 0, "one-way delay to add on the veth pair (not supported: this kernel lacks sch_netem)")
	f.BoolVar(&lockWriters, "lock-writers", false, "experiment: add dyad-channel and dyad-ddsnet rows whose writing goroutines are locked to their OS threads")
	f.StringVar(&profile, "profile-dir", "", "internal: directory for the children's CPU profiles")
	f.MarkHidden("profile-dir")
	f.StringVar(&role, "role", "", "internal: run as the respond or ping child")
	f.StringVar(&job, "job", "", "internal: the child's job (JSON)")
	f.MarkHidden("role")
	f.MarkHidden("job")
	return cmd
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		mul := 1
		if l := strings.ToLower(f); strings.HasSuffix(l, "k") {
			mul, f = 1024, f[:len(f)-1]
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 || n*mul > 1<<20 {
			return nil, fmt.Errorf("perf: bad size %q (0..1MiB)", f)
		}
		out = append(out, n*mul)
	}
	return out, nil
}

// perfChild is one end of one dyad receive path, inside a namespace.
// respond prints "ready" and echoes until ctx ends; ping prints one JSON
// perf.Row per size.
func perfChild(ctx context.Context, role string, j perfJob, w io.Writer) error {
	if j.Profile != "" {
		f, err := os.Create(filepath.Join(j.Profile, fmt.Sprintf("%s-%d.pprof", role, os.Getpid())))
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if j.Pair {
		switch role {
		case "respond":
			return perfPairRespond(ctx, j, func() { fmt.Fprintln(w, "ready") })
		case "ping":
			enc := json.NewEncoder(w)
			return perfPairPing(ctx, j, func(r perf.Row) error { return enc.Encode(r) })
		}
		return fmt.Errorf("perf: unknown role %q", role)
	}
	if j.Net {
		switch role {
		case "respond":
			return perfNetRespond(ctx, j, func() { fmt.Fprintln(w, "ready") })
		case "ping":
			enc := json.NewEncoder(w)
			return perfNetPing(ctx, j, func(r perf.Row) error { return enc.Encode(r) })
		}
		return fmt.Errorf("perf: unknown role %q", role)
	}
	p, err := dds.NewParticipant(j.config())
	if err != nil {
		return err
	}
	defer p.Close()
	opt := dds.PerfOptions{Mode: dds.ReceiveListener, Inline: j.Inline, StampWrites: true, LockOSThread: j.Lock}
	if j.WriteBatch {
		opt.Burst = perfBurst
	}
	if j.WaitSet {
		opt.Mode = dds.ReceiveWaitSet
	}
	switch role {
	case "respond":
		fmt.Fprintln(w, "ready")
		return dds.Respond(ctx, p, opt)
	case "ping":
		enc := json.NewEncoder(w)
		for _, sz := range j.Sizes {
			row := perf.Row{Size: sz}
			if j.Count > 0 {
				st, err := dds.PingPong(ctx, p, opt, sz, j.Count)
				if err != nil {
					return fmt.Errorf("ping size %d: %w", sz, err)
				}
				row.RTT = perf.RTT{Count: st.Count, P50: st.P50, P90: st.P90, P99: st.P99, Max: st.Max}
				ws := make([]perf.WriteSample, 0, len(st.Writes))
				for _, w := range st.Writes {
					ws = append(ws, perfWriteSample(w.Send, w.Stamp))
				}
				row.Writes = perf.SplitWrites(ws, perfWriteSample(0, dds.StampCost(1000)))
			}
			if j.TputDur > 0 {
				tp, err := dds.Throughput(ctx, p, opt, sz, j.TputDur)
				if err != nil {
					return fmt.Errorf("throughput size %d: %w", sz, err)
				}
				row.Tput = perf.Tput{Count: tp.Count, Rate: tp.Rate, MBps: tp.MBps}
			}
			if err := enc.Encode(row); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("perf: unknown role %q", role)
}

// perfWriteSample is a stamped write of a Send that took send.
func perfWriteSample(send time.Duration, st dds.WriteStamp) perf.WriteSample {
	return perf.WriteSample{Send: send, Call: st.Call, Write: st.Write, CPU: st.CPU, Voluntary: st.Voluntary, Involuntary: st.Involuntary}
}

type perfRun struct {
	sizes   []int
	count   int
	tputDur time.Duration
	domain  uint32
	extra   string
	ddsperf string
	out     string
	noTput  bool
	// noLat skips the round trips (the children get Count 0).
	noLat  bool
	secure bool
	// systems, if not empty, are the only systems run (ddsperf and the
	// names of perfPaths, without the secured suffix).
	systems []string
	profile string // perfJob.Profile
	// lockWriters adds perfLockedPaths.
	lockWriters bool
}

// pathTimeout bounds one dyad path (all sizes): 2 ms per round trip (about
// ten times a slow secured one), the throughput phase, and 20 s per size
// for start-up, discovery and the security handshake.
func (r perfRun) pathTimeout() time.Duration {
	perSize := 20 * time.Second
	if !r.noLat {
		perSize += time.Duration(r.count) * 2 * time.Millisecond
	}
	if !r.noTput {
		perSize += r.tputDur
	}
	return time.Duration(len(r.sizes)) * perSize
}

// runs reports whether system is to be run (--systems).
func (r perfRun) runs(system string) bool {
	return len(r.systems) == 0 || slices.Contains(r.systems, system)
}

// perfVariant is one configuration every system runs in: plain, and with
// --secure also secured.
type perfVariant struct {
	suffix     string
	jobA, jobB perfJob
	// ddsperfExtra lengthens ddsperf's publishing phase: a secured pub
	// spends its first fraction of a second authenticating, and ddsperf
	// reports only whole seconds with data (its best one counts).
	ddsperfExtra time.Duration
}

func runPerf(ctx context.Context, cmd *cobra.Command, r perfRun) error {
	if os.Geteuid() != 0 {
		return errors.New("perf: needs root to create network namespaces")
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	pair, err := perf.NewPair("dyadperf")
	if err != nil {
		return err
	}
	defer pair.Close()
	host, _ := os.Hostname()
	jobA := perfJob{Domain: r.domain, Iface: pair.IfA, Peer: pair.AddrB, ExtraXML: r.extra, Profile: r.profile}
	jobB := perfJob{Domain: r.domain, Iface: pair.IfB, Peer: pair.AddrA, ExtraXML: r.extra, Profile: r.profile,
		Sizes: r.sizes, Count: r.count}
	if r.noLat {
		jobB.Count = 0
	}
	if !r.noTput {
		jobB.TputDur = r.tputDur
	}
	res := &perf.Results{Start: time.Now(), Host: host, Baseline: "ddsperf", Config: jobB.config().XML()}
	variants := []perfVariant{{"", jobA, jobB, 0}}
	if r.secure {
		dir, err := os.MkdirTemp("", "dyadperf-pki-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		secA, secB, err := perfSecurity(dir, pair, r.domain)
		if err != nil {
			return err
		}
		sa, sb := jobA, jobB
		sa.Security, sb.Security = secA, secB
		variants = append(variants, perfVariant{perf.SecureSuffix, sa, sb, time.Second})
	}

	paths := perfPaths
	if r.lockWriters {
		paths = append(slices.Clone(paths), perfLockedPaths...)
	}
	if len(r.systems) > 0 {
		paths = slices.DeleteFunc(slices.Clone(paths), func(p perfPathSpec) bool { return !r.runs(p.name) })
		if !r.runs("ddsperf") {
			r.ddsperf = ""
		}
	}
	steps := len(paths) * len(variants)
	if r.ddsperf != "" {
		steps += len(r.sizes) * len(variants)
	}
	bar := progressbar.NewOptions(steps, progressbar.OptionSetWriter(cmd.ErrOrStderr()),
		progressbar.OptionSetWidth(30), progressbar.OptionSetPredictTime(true), progressbar.OptionSetDescription("ddsperf"))
	if r.ddsperf != "" {
		// ddsperf's ping runs for a time, not a count: give it about as long
		// as dyad's count takes at ~10k round trips/s, at least 3s.
		pingDur := max(3*time.Second, time.Duration(r.count)*100*time.Microsecond)
		for _, v := range variants {
			d := perf.Ddsperf{Bin: r.ddsperf, Pair: pair, Domain: r.domain, XMLA: v.jobA.config().XML(), XMLB: v.jobB.config().XML()}
			for _, sz := range r.sizes {
				bar.Describe(fmt.Sprintf("ddsperf%s %dB", v.suffix, sz))
				row := perf.Row{System: "ddsperf" + v.suffix, Size: sz}
				var errs []string
				if !r.noLat {
					if row.RTT, err = d.Ping(ctx, sz, pingDur); err != nil {
						errs = append(errs, err.Error())
					}
				}
				if !r.noTput {
					if row.Tput, err = d.PubSub(ctx, sz, r.tputDur+v.ddsperfExtra); err != nil {
						errs = append(errs, err.Error())
					}
				}
				row.Err = strings.Join(errs, "; ")
				res.Rows = append(res.Rows, row)
				bar.Add(1)
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
	}
	for _, path := range paths {
		for _, v := range variants {
			name := path.name + v.suffix
			bar.Describe(name)
			a, b := v.jobA, v.jobB
			a.Net, b.Net = path.net, path.net
			a.Pair, b.Pair = path.pair, path.pair
			a.Lock, b.Lock = path.lock, path.lock
			a.WaitSet, b.WaitSet = path.waitset, path.waitset
			a.WriteBatch, b.WriteBatch = path.batch, path.batch
			// A path that stops making progress (seen once with DDS Security,
			// not reproduced) becomes an error row instead of a hung run.
			pctx, cancel := context.WithTimeout(ctx, r.pathTimeout())
			rows, err := perfPath(pctx, self, pair, a, b, path.inline)
			timedOut := pctx.Err() == context.DeadlineExceeded
			cancel()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if timedOut {
					err = fmt.Errorf("no result within %v: %w", r.pathTimeout(), err)
				}
				res.Rows = append(res.Rows, perf.Row{System: name, Err: err.Error()})
			}
			for _, row := range rows {
				row.System = name
				res.Rows = append(res.Rows, row)
			}
			bar.Add(1)
		}
	}
	bar.Finish()
	fmt.Fprintln(cmd.ErrOrStderr())
	if err := res.WriteTable(cmd.OutOrStdout()); err != nil {
		return err
	}
	if r.out != "" {
		return res.Save(r.out)
	}
	return nil
}

// perfSecurity writes DDS Security material for the two ends into dir (end
// a is node "a" at pair.AddrA, b node "b") and returns each end's
// <Security> element. Topics and partitions "*": the perf protocol's and
// ddsperf's topics are not dyad's replication topics, and ddsperf uses
// partitions.
func perfSecurity(dir string, pair *perf.Pair, domain uint32) (string, string, error) {
	if _, err := certs.Write(certs.Plan{Dir: dir, Nodes: []certs.Node{{Name: "a", Hosts: []string{pair.AddrA}}, {Name: "b", Hosts: []string{pair.AddrB}}},
		Clients: []string{}, Domain: int(domain), Topics: []string{"*"}, Partitions: []string{"*"}, Now: time.Now(), Validity: 24 * time.Hour}); err != nil {
		return "", "", err
	}
	xml := func(node string) (string, error) {
		f := certs.Files(dir, node)
		ca := filepath.Join(dir, certs.CACertFile)
		s := dds.Security{IdentityCA: ca, IdentityCert: f.PeerCert, PrivateKey: f.PeerKey, PermissionsCA: ca,
			Governance: filepath.Join(dir, certs.GovernanceFile), Permissions: filepath.Join(dir, certs.PermissionsFile)}
		if err := s.Check(); err != nil {
			return "", err
		}
		return s.XML()
	}
	a, err := xml("a")
	if err != nil {
		return "", "", err
	}
	b, err := xml("b")
	return a, b, err
}

// perfPath runs one dyad receive path: responder child in namespace A,
// pinger child in namespace B; returns the pinger's rows.
func perfPath(ctx context.Context, self string, pair *perf.Pair, a, b perfJob, inline bool) ([]perf.Row, error) {
	a.Inline, b.Inline = inline, inline
	child := func(ctx context.Context, ns, role string, j perfJob) *exec.Cmd {
		js, _ := json.Marshal(j)
		c := exec.CommandContext(ctx, "ip", "netns", "exec", ns, self, "perf", "--role", role, "--job", string(js))
		c.Cancel = func() error { return c.Process.Signal(syscall.SIGTERM) }
		c.WaitDelay = 5 * time.Second
		return c
	}
	rctx, stopResp := context.WithCancel(ctx)
	resp := child(rctx, pair.NsA, "respond", a)
	var respErr strings.Builder
	resp.Stderr = &respErr
	rout, err := resp.StdoutPipe()
	if err != nil {
		stopResp()
		return nil, err
	}
	if err := resp.Start(); err != nil {
		stopResp()
		return nil, err
	}
	// The responder is stopped (SIGTERM, then killed) and reaped on every
	// return path.
	defer func() { stopResp(); resp.Wait() }()
	if line, _ := bufio.NewReader(rout).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		return nil, fmt.Errorf("responder did not start: %q %s", line, respErr.String())
	}
	ping := child(ctx, pair.NsB, "ping", b)
	var perr strings.Builder
	ping.Stderr = &perr
	out, err := ping.Output()
	var rows []perf.Row
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var row perf.Row
		if derr := dec.Decode(&row); derr != nil {
			break
		}
		rows = append(rows, row)
	}
	if err != nil {
		return rows, fmt.Errorf("pinger: %v: %s", err, strings.TrimSpace(perr.String()))
	}
	return rows, nil
}
