package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/bench"
	"github.com/dyad-db/dyad/internal/bench/floor"
	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/scale"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/twozone"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// defaultBenchTargets is every target the bench can start by itself.
const defaultBenchTargets = "dyad,dyad-pair,etcd-1,etcd-3,kine-sqlite,kine-pg"

func benchCmd() *cobra.Command {
	var (
		targets, clients, ops, profile, endpoints, out, peersDir, dyadBin, pgBin, workDir, logLevel string
		duration, warmup                                                                            time.Duration
		total                                                                                       int64
		seed                                                                                        uint64
		valueSize                                                                                   int
		keep, noFloor                                                                               bool
		floorSamples, rounds                                                                        int
		tz                                                                                          twozone.Config
		zoneDelays                                                                                  string
		sc                                                                                          scale.Config
	)
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure dyad beside etcd and kine on this machine, with the same client and workload",
		Long: `bench starts each target in turn on this machine, runs every operation kind
at every client count against it, and writes a results directory:
summary.md (tables, machine, versions, dyad's figures as ratios against
etcd-3 and kine-pg of the same run), index.html (the same plus latency CDFs
and throughput-vs-clients plots) and results.json.

Targets: ` + strings.Join(target.Names(), ", ") + `.
  dyad         dyad serve, single node
  dyad-pair    two dyad nodes in two network namespaces, over DDS (needs root)
  etcd-1/2/3   etcd 3.6 with 1, 2 or 3 members (scripts/peers.sh etcd-3.6)
  kine-sqlite  kine v0.17.5 over SQLite (scripts/peers.sh kine)
  kine-pg      kine over a private PostgreSQL cluster (Debian's postgresql)
  external     the endpoints given with --endpoints (see the key prefixes below)

Profiles (--profile) choose the operations:
  raw     ` + opList("raw") + `
  k8s     ` + opList("k8s") + `
  phases  ` + opList("phases") + `
and the two-zone benchmarks, which run after a target's operations:
  replication  dyad-pair: write acknowledged on one zone → watch on the other
               delivers it (M1), replica lag vs 0.5 s (M3), linearizable reads
               on the primary and the replica under the write load, HashKV
  failover     dyad-pair: kill -9 the primary --kills times under load; write
               outage vs 2 s, acknowledged writes lost, resync time, time solo,
               and throughput in the phases steady / a zone lost / the zone
               rejoining (M2)
  load         dyad-pair: CPU hogs on every core plus writes for
               --load-duration; role changes and false failovers (must be 0)
  contrast     etcd-1/2/3, kine-*: the same zone loss (etcd-3 as 2+1: kill the
               2-member side; kine-pg: kill PostgreSQL); a freeze is a result
  delay        dyad-pair and etcd-3: start a copy whose zones (etcd: every pair
               of members) are --zone-delays apart each way through a
               userspace shaper, and measure puts at 1 and --delay-clients
               clients (the target dyad-pair@2ms or etcd-3@2ms alone runs the
               whole matrix that way)
  two-zone     all five
and the scale profile, after a target's operations too:
  scale        dyad, dyad-pair, etcd-1, etcd-3: load --scale-objects pod-shaped
               objects, then time to serve after a restart, get latency, put
               rate and watch lag under --scale-watchers watchers (closed-loop
               writers, then puts paced at --scale-watch-rate), and put
               latency during a storm of paginated LISTs
"all" (the default) is every profile of every list.

The write floor: when a run measures put or runs the delay cases, bench
first measures what a replicated write cannot cost less than on this
machine: an append of a --value-size record plus fdatasync to a file
preallocated in the work directory (--floor-samples of them), plus one DDS
round trip of a --value-size message between two zones' namespaces laid out
as dyad-pair's (dyad perf's ddsnet+ws+batch ping-pong, the path of the
replication loop, run by --dyad-bin), for every
zone layout of the run (the veth, and each delay through the shaper). The
report's "Write floor" section gives the parts, floor = fdatasync p50 +
round trip p50, and every put p50 and p99 at 1 client divided by the floor
of its layout. With Cyclone's ddsperf on PATH, its round trip in the same
namespaces is shown beside it for reference, and the floor it would give.
It takes a few seconds per layout; --no-floor skips it.

The k8s and phases keys live under /registry/bench.dyad.io/dyad-bench/, the
raw ones under dyad-bench/. An operation a target does not implement is
reported as "unsupported".

scripts/bench.sh installs and builds everything, then runs this command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if rounds < 1 {
				return fmt.Errorf("--rounds %d: must be at least 1", rounds)
			}
			cfg := bench.Config{Duration: duration, OpCount: total, Warmup: warmup, Seed: seed, ValueSize: valueSize, Rounds: rounds,
				Progress: cmd.ErrOrStderr(), Command: "dyad " + strings.Join(os.Args[1:], " ")}
			for _, t := range strings.Split(targets, ",") {
				if t = strings.TrimSpace(t); t != "" {
					cfg.Targets = append(cfg.Targets, t)
				}
			}
			if endpoints != "" && !strings.Contains(","+targets+",", ",external,") {
				cfg.Targets = append(cfg.Targets, "external")
			}
			var err error
			if cfg.Clients, err = bench.ParseClients(clients); err != nil {
				return err
			}
			zoneProfiles, requestProfiles := twozone.SplitProfiles(profile)
			withScale := slices.Contains(requestProfiles, "all") || slices.Contains(requestProfiles, scale.Profile)
			requestProfiles = slices.DeleteFunc(requestProfiles, func(p string) bool { return p == scale.Profile })
			switch {
			case cmd.Flags().Changed("ops"):
				cfg.Ops, err = workload.ParseOps(ops)
			case len(requestProfiles) > 0:
				cfg.Ops, err = workload.ProfileOps(strings.Join(requestProfiles, ","))
			}
			if err != nil {
				return err
			}
			for _, d := range strings.Split(zoneDelays, ",") {
				if d = strings.TrimSpace(d); d == "" {
					continue
				}
				v, err := time.ParseDuration(d)
				if err != nil || v < 0 {
					return fmt.Errorf("--zone-delays: %q is not a delay", d)
				}
				tz.Delays = append(tz.Delays, v)
			}
			var zb *twozone.Bench
			var extras []extraBench
			if len(zoneProfiles) > 0 {
				tz.ValueSize, tz.Prefix = valueSize, "dyad-bench/"
				zb = &twozone.Bench{Selected: zoneProfiles, Config: tz}
				extras = append(extras, extraBench{zb.Run, zb.Expected})
			}
			if withScale {
				sc.Prefix, sc.PageSize = "/registry/bench.dyad.io/dyad-bench/", 500
				sb := &scale.Bench{Config: sc}
				extras = append(extras, extraBench{sb.Run, sb.Expected})
			}
			if len(extras) > 0 {
				cfg.Extra, cfg.ExtraTime = chainExtras(extras)
				// The scale profile pools its rounds (median of each
				// figure); the two-zone benchmarks run once, so with
				// them the extras keep to the last round.
				cfg.ExtraEachRound = zb == nil
			}
			if dyadBin == "" {
				if dyadBin, err = os.Executable(); err != nil {
					return err
				}
			}
			if peersDir == "" {
				peersDir = defaultPeersDir()
			}
			if workDir == "" {
				if workDir, err = bench.DefaultWorkDir(); err != nil {
					return err
				}
				if keep {
					// What is kept is every target's data directory of
					// every cell and round beside its log: a full
					// matrix keeps gigabytes, so say where and how much.
					defer func() {
						fmt.Fprintf(cmd.ErrOrStderr(), "kept: %s (%s; remove it when done)\n", workDir, humanBytes(diskUsage(workDir)))
					}()
				} else {
					defer os.RemoveAll(workDir)
				}
			}
			if out == "" {
				out = filepath.Join("bench-results", time.Now().Format("20060102-150405"))
			}
			cfg.Out = out
			cfg.Env = target.Env{Bins: target.Bins{Dyad: dyadBin, PeersDir: peersDir, PGBinDir: pgBin},
				WorkDir: workDir, LogLevel: logLevel}
			if !noFloor {
				layouts := floorLayouts(cfg.Targets, cfg.Ops, slices.Contains(zoneProfiles, twozone.ProfileDelay), tz.Delays)
				if len(layouts) > 0 {
					fc := floor.Config{Dir: workDir, Size: valueSize, Samples: floorSamples, Layouts: layouts,
						RoundTrip: floorRoundTrip(dyadBin), Method: floorMethod}
					if bin, err := exec.LookPath("ddsperf"); err == nil {
						fc.Reference, fc.RefName = floorReference(bin), "ddsperf"
					}
					cfg.Floor, cfg.FloorTime = fc.Run, fc.Expected()
				}
			}
			if withScale {
				cfg.Env.QuotaBytes = 8 << 30 // 500,000 objects of 2 KiB outgrow the default 2 GiB
			}
			if zb != nil {
				zb.Env = cfg.Env
			}
			for _, e := range strings.Split(endpoints, ",") {
				if e = strings.TrimSpace(e); e != "" {
					cfg.Env.External = append(cfg.Env.External, e)
				}
			}
			// SIGINT/SIGTERM cancel the run; Run then stops the running
			// target and still writes what was measured.
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			rep, err := bench.Run(ctx, cfg)
			if rep != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "results: %s\n", out)
				for _, t := range rep.Targets {
					if t.Error != "" {
						fmt.Fprintf(cmd.ErrOrStderr(), "target %s failed: %s\n", t.Name, t.Error)
					}
				}
			}
			return err
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&targets, "targets", defaultBenchTargets, "Comma-separated targets to start and measure, in this order.")
	fl.StringVar(&clients, "clients", "1,8,64,256", "Comma-separated numbers of concurrent clients; each operation runs once per number.")
	fl.DurationVar(&duration, "duration", 5*time.Second, "Measured time per (target, operation, clients) cell.")
	fl.Int64Var(&total, "total", 0, "Requests per cell instead of a duration (0: use --duration).")
	fl.IntVar(&rounds, "rounds", 1, "Run the request matrix this many times, the targets taking turns within each round (each started afresh), and pool each cell's rounds: latencies over every request, throughput over all measured time, each round's throughput kept in results.json. On a busy or shared machine the ratios then rest on more than one run of each system. The scale profile alone (no two-zone profile beside it) runs in every round too, on a freshly loaded target, and shows each figure's median; the two-zone profiles (failover, delay, replication, ...) run once, in the last round.")
	fl.DurationVar(&warmup, "warmup", time.Second, "Unmeasured warm-up before each cell.")
	fl.StringVar(&ops, "ops", "all", "Comma-separated operations (overrides --profile): "+strings.Join(opNames(), ", ")+", or all (the raw ones).")
	fl.StringVar(&profile, "profile", "all", "Comma-separated workload profiles: raw (etcd benchmark-style puts and ranges), k8s (apiserver-shaped requests), phases (the study's steady state and pod burst), or all; and replication, failover, load, contrast, delay or two-zone (see above).")
	fl.IntVar(&tz.Kills, "kills", 20, "failover: primaries killed in the series.")
	fl.DurationVar(&tz.Settle, "settle", 2*time.Second, "failover, contrast: load before each kill.")
	fl.IntVar(&tz.Writers, "zone-writers", 4, "Two-zone benchmarks: writers per zone (contrast: in all).")
	fl.IntVar(&tz.Readers, "zone-readers", 2, "Two-zone benchmarks: linearizable readers per zone.")
	fl.DurationVar(&tz.Duration, "repl-duration", 30*time.Second, "replication: measured time.")
	fl.DurationVar(&tz.LoadDuration, "load-duration", 3*time.Minute, "load: time with CPU hogs.")
	fl.DurationVar(&tz.Window, "fault-window", 10*time.Second, "contrast: how long to wait for writes after the kill.")
	fl.IntVar(&sc.Objects, "scale-objects", 500000, "scale: objects loaded (fewer for a quick run).")
	fl.IntVar(&sc.ObjectSize, "scale-object-size", 2048, "scale: bytes per object.")
	fl.IntVar(&sc.Watchers, "scale-watchers", 1000, "scale: watchers on the object prefix.")
	fl.IntVar(&sc.WatchRate, "scale-watch-rate", 1000, "scale: puts per second of the paced phase under the watchers, issued open-loop (0 skips it).")
	fl.IntVar(&sc.Writers, "scale-writers", 16, "scale: concurrent writers in the put phases.")
	fl.IntVar(&sc.Listers, "scale-listers", 2, "scale: concurrent paginated LISTs in the storm.")
	fl.DurationVar(&sc.Duration, "scale-duration", 10*time.Second, "scale: measured time per phase.")
	fl.StringVar(&zoneDelays, "zone-delays", "0s,0.5ms,2ms", "delay: comma-separated one-way delays between the zones (0s: through the shaper, no delay).")
	fl.DurationVar(&tz.DelayDuration, "delay-duration", 5*time.Second, "delay: measured time per cell.")
	fl.IntVar(&tz.DelayClients, "delay-clients", 64, "delay: clients of the throughput cell.")
	fl.BoolVar(&noFloor, "no-floor", false, "Skip the write floor (measured before the first target when the run has puts or the delay cases; see above).")
	fl.IntVar(&floorSamples, "floor-samples", 1000, "Write floor: fdatasyncs timed, and DDS round trips per zone layout (fewer when the zones are far apart).")
	fl.Uint64Var(&seed, "seed", 1, "Seed of every key and value: the same seed sends the same requests to every target.")
	fl.IntVar(&valueSize, "value-size", 256, "Bytes per written value (printable text).")
	fl.StringVar(&out, "out", "", "Results directory (default bench-results/<date-time>).")
	fl.StringVar(&endpoints, "endpoints", "", "Comma-separated host:port of an etcd-API server you run; adds the \"external\" target.")
	fl.StringVar(&peersDir, "peers-bin", "", "Directory with etcd-3.6 and kine from scripts/peers.sh (default $DYAD_PEERS_BIN, else .cache/peers/bin).")
	fl.StringVar(&dyadBin, "dyad-bin", "", "dyad binary the dyad targets run (default: this one).")
	fl.StringVar(&pgBin, "pg-bin-dir", "", "PostgreSQL bin directory with initdb and postgres (default: Debian's newest /usr/lib/postgresql/*/bin).")
	fl.StringVar(&workDir, "work-dir", "", "Directory for the targets' data and logs (default: a fresh temporary one, removed afterwards).")
	fl.BoolVar(&keep, "keep", false, "Keep the temporary work directory after the run: every target's data directory and log, per cell and round (a full matrix keeps several GB; its path and size are printed at the end).")
	fl.StringVar(&logLevel, "server-log-level", "warn", "Log level of the dyad and etcd servers the bench starts.")
	return cmd
}

// extraBench is one benchmark run after a target's matrix.
type extraBench struct {
	run      func(context.Context, target.Target, []string, *report.Report, func(string, float64)) error
	expected func(target.Target) time.Duration
}

// chainExtras runs each extra in turn (bench.Config.Extra) and adds up
// their expected times; the progress of each is scaled to its share.
func chainExtras(extras []extraBench) (func(context.Context, target.Target, []string, *report.Report, func(string, float64)) error, func(target.Target) time.Duration) {
	expected := func(t target.Target) time.Duration {
		var d time.Duration
		for _, e := range extras {
			d += e.expected(t)
		}
		return d
	}
	run := func(ctx context.Context, t target.Target, eps []string, rep *report.Report, progress func(string, float64)) error {
		total := expected(t)
		var errs []error
		var done time.Duration
		for _, e := range extras {
			share := e.expected(t)
			if share == 0 {
				continue
			}
			before := done
			err := e.run(ctx, t, eps, rep, func(desc string, frac float64) {
				progress(desc, float64(before+time.Duration(frac*float64(share)))/float64(total))
			})
			done += share
			errs = append(errs, err)
			if ctx.Err() != nil {
				break
			}
		}
		return errors.Join(errs...)
	}
	return run, expected
}

func opList(profile string) string {
	var s []string
	for _, o := range workload.Profiles[profile] {
		s = append(s, string(o))
	}
	return strings.Join(s, ", ")
}

func opNames() []string {
	var s []string
	for _, o := range workload.AllOps {
		s = append(s, string(o))
	}
	return s
}

// defaultPeersDir is $DYAD_PEERS_BIN, else $DYAD_CACHE/peers/bin, else
// .cache/peers/bin (scripts/peers.sh's default, relative to the repo root
// the bench is normally run from).
func defaultPeersDir() string {
	if d := os.Getenv("DYAD_PEERS_BIN"); d != "" {
		return d
	}
	if d := os.Getenv("DYAD_CACHE"); d != "" {
		return filepath.Join(d, "peers", "bin")
	}
	return filepath.Join(".cache", "peers", "bin")
}

// diskUsage is the bytes the regular files under dir hold (what a kept
// work directory costs); unreadable entries are skipped.
func diskUsage(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// humanBytes formats n in binary units, one decimal (e.g. "5.3 GiB").
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTP"[i])
}
