package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// Config is one `dyad bench` invocation.
type Config struct {
	Targets  []string
	Ops      []workload.Op
	Clients  []int
	Duration time.Duration // per cell; ignored when OpCount > 0
	OpCount  int64         // requests per cell
	Warmup   time.Duration
	Seed     uint64
	// ValueSize is the size of every written value, in bytes.
	ValueSize int
	Out       string // results directory
	Env       target.Env
	// Command is recorded in the report (the command line that ran).
	Command string
	// Progress receives the progress bar; nil: none.
	Progress io.Writer
	// Extra, when set, runs after the matrix on each target while it is
	// up (see the package comment). It reports progress through progress
	// (what runs, and the fraction of its part done).
	Extra func(ctx context.Context, t target.Target, endpoints []string, r *report.Report, progress func(desc string, frac float64)) error
	// ExtraTime, when set, is how long Extra is expected to take on a
	// target: its share of the progress bar, so that the bar's estimate
	// of the time left holds. Without it (or at 0) Extra counts as one
	// cell of the matrix.
	ExtraTime func(t target.Target) time.Duration
	// Floor, when set, runs once before the first target starts, so that
	// no target competes with it, and may add sections to the report: the
	// write floor (package floor). FloorTime is how long it is expected
	// to take, its share of the progress bar. A Floor that fails is a note
	// in the report, not a failed run.
	Floor     func(ctx context.Context, rep *report.Report, progress func(desc string, frac float64)) error
	FloorTime time.Duration
	// Rounds is how many times the matrix runs (0 or 1: once). The
	// targets take turns within each round, each started afresh, so that
	// a drift of the machine (its disk's write-back, another tenant)
	// falls on every system rather than on whichever ran then; each
	// cell's rounds are pooled (workload.Pool). Extra runs once per
	// target, in the last round, unless ExtraEachRound.
	Rounds int
	// ExtraEachRound runs Extra in every round, after the target's
	// matrix, so that its figures too rest on turns taken by every
	// target; Extra keeps and pools its rounds itself (the scale
	// profile).
	ExtraEachRound bool
	// CellGrace is how long a cell of the matrix may run beyond its
	// warm-up and duration before it is given up (default 3 min: the
	// prefill on the slowest target). A target that died mid-run would
	// otherwise hold the cell forever.
	CellGrace time.Duration
}

// keyPrefix starts every key the bench writes, so an external target's own
// data is never touched.
const keyPrefix = "dyad-bench/"

// Run measures every target and writes the report into cfg.Out. An error
// means no report could be written; failed targets are recorded in it.
func Run(ctx context.Context, cfg Config) (*report.Report, error) {
	if len(cfg.Targets) == 0 || (len(cfg.Ops) == 0 && cfg.Extra == nil && cfg.Floor == nil) || len(cfg.Clients) == 0 {
		return nil, errors.New("bench: nothing to run (targets, operations and client counts must be non-empty)")
	}
	targets := make([]target.Target, 0, len(cfg.Targets))
	for _, name := range cfg.Targets {
		t, err := target.New(name, cfg.Env)
		if err != nil {
			return nil, err
		}
		targets = append(targets, t)
	}
	rep := &report.Report{
		Started: time.Now(), Command: cfg.Command, Seed: cfg.Seed,
		Duration: cfg.Duration, Ops: cfg.OpCount,
		Machine: report.Describe(cfg.Env.WorkDir),
	}
	rep.Sections = append(rep.Sections, report.Headline(rep))
	if rep.Machine.Cores <= 4 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("This machine has %d cores: the clients share them with the servers, so figures are lower than on a dedicated server.", rep.Machine.Cores))
	}
	if slices.ContainsFunc(cfg.Targets, func(t string) bool { return strings.HasPrefix(t, "kine") }) {
		rep.Notes = append(rep.Notes, "kine's LeaseGrant stores nothing (it answers with the TTL as the lease ID), so its lease-grant figures, and dyad's ratios against them, measure a no-op.")
	}
	if r := cfg.rounds(); r > 1 && len(cfg.Ops) > 0 {
		others := "The other benchmarks ran once, in the last round."
		if cfg.ExtraEachRound {
			others = "The other benchmarks ran in every round too."
		}
		rep.Notes = append(rep.Notes, fmt.Sprintf("Each cell of the request tables ran %d times, the targets taking turns within each round, each round on a freshly started target. A cell's latencies pool the requests of every round and its throughput is every request over all measured time; results.json keeps each round's throughput (rounds_ops_per_s). %s", r, others))
	}
	if slices.Contains(cfg.Targets, "kine-sqlite") {
		rep.Notes = append(rep.Notes, "kine over SQLite runs with kine's default DSN (WAL, synchronous=NORMAL): its commits are not fsynced, unlike dyad, etcd and PostgreSQL.")
	}

	// The bar counts expected milliseconds, so that its estimate of the
	// time left holds although the two-zone benchmarks take minutes where
	// a cell of the matrix takes seconds.
	rounds := cfg.rounds()
	weights := make([]targetWeight, len(targets))
	floorWeight := int64(0)
	if cfg.Floor != nil {
		floorWeight = max(cfg.FloorTime.Milliseconds(), 1)
	}
	total := floorWeight
	for i, t := range targets {
		weights[i] = cfg.weight(t)
		total += weights[i].total()
	}
	out := cfg.Progress
	if out == nil {
		out = io.Discard
	}
	bar := progressbar.NewOptions64(max(total, 1),
		progressbar.OptionSetWriter(out), progressbar.OptionSetWidth(30),
		progressbar.OptionSetPredictTime(true), progressbar.OptionFullWidth(),
		progressbar.OptionSetDescription("starting"), progressbar.OptionThrottle(100*time.Millisecond))

	if cfg.Floor != nil {
		err := cfg.Floor(ctx, rep, func(desc string, frac float64) {
			bar.Describe(desc)
			_ = bar.Set64(int64(min(max(frac, 0), 1) * float64(floorWeight)))
		})
		if err != nil {
			rep.Notes = append(rep.Notes, "The write floor was not measured in full: "+err.Error())
		}
		_ = bar.Set64(floorWeight)
	}
	done := floorWeight // weight of the parts finished
	runs := make([][]report.Target, len(targets))
rounds:
	for round := 1; round <= rounds; round++ {
		for i, t := range targets {
			if ctx.Err() != nil {
				break rounds
			}
			if n := len(runs[i]); n > 0 && runs[i][n-1].Error != "" {
				continue // failed in an earlier round: its error stands
			}
			if round > 1 {
				// A fresh instance in a directory of its own: the
				// previous round's data and ports stay behind it.
				env := cfg.Env
				env.WorkDir = filepath.Join(cfg.Env.WorkDir, fmt.Sprintf("round%d", round))
				err := os.MkdirAll(env.WorkDir, 0o755)
				var nt target.Target
				if err == nil {
					nt, err = target.New(t.Name(), env)
				}
				if err != nil {
					runs[i] = append(runs[i], report.Target{Name: t.Name(), Error: err.Error()})
					continue
				}
				t = nt
			}
			w := weights[i]
			start := done
			cur := w.cell // weight of the cell under way
			extra := cfg.extraIn(round)
			tr := runTarget(ctx, cfg, t, rep, extra, func(desc string) {
				if rounds > 1 {
					desc = fmt.Sprintf("round %d/%d: %s", round, rounds, desc)
				}
				bar.Describe(desc)
			},
				func(extra bool) {
					if cur = w.cell; extra {
						cur = w.extra
					}
				},
				func(frac float64) { _ = bar.Set64(done + int64(frac*float64(cur))) },
				func() { done += cur })
			runs[i] = append(runs[i], tr)
			done = start + w.cells/int64(rounds)*w.cell
			if extra {
				done += w.extra
			}
			_ = bar.Set64(done)
		}
	}
	for i := range targets {
		if len(runs[i]) > 0 {
			rep.Targets = append(rep.Targets, poolTarget(runs[i]))
		}
	}
	_ = bar.Finish()
	fmt.Fprintln(out)
	rep.Finished = time.Now()
	rep.Machine.LoadAvgEnd = report.LoadAvg()
	if err := rep.Write(cfg.Out); err != nil {
		return rep, fmt.Errorf("writing the report: %w", err)
	}
	return rep, ctx.Err()
}

// defaultCellGrace is Config.CellGrace's default.
const defaultCellGrace = 3 * time.Minute

// cellLimit bounds one cell of the matrix (0: none, for a count of
// requests, whose length is not known).
func (cfg Config) cellLimit() time.Duration {
	if cfg.OpCount > 0 {
		return 0
	}
	grace := cfg.CellGrace
	if grace <= 0 {
		grace = defaultCellGrace
	}
	return cfg.Warmup + cfg.Duration + grace
}

// cellContext is ctx bounded by cellLimit.
func (cfg Config) cellContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d := cfg.cellLimit(); d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

// targetWeight is a target's share of the progress bar, in expected
// milliseconds: cells of the matrix, and the Extra.
type targetWeight struct {
	cells, cell, extra int64
	extraRounds        int64 // rounds the Extra runs in
}

func (w targetWeight) total() int64 { return w.cells*w.cell + w.extraRounds*w.extra }

// weight is t's share of the progress bar.
func (cfg Config) weight(t target.Target) targetWeight {
	cell := (cfg.Warmup + cfg.Duration).Milliseconds()
	if cfg.OpCount > 0 || cell <= 0 {
		cell = time.Second.Milliseconds() // a count of requests: unknown length
	}
	w := targetWeight{cells: int64(len(cfg.Ops) * len(cfg.Clients) * cfg.rounds()), cell: cell}
	if cfg.Extra != nil {
		w.extra, w.extraRounds = cell, 1
		if cfg.ExtraEachRound {
			w.extraRounds = int64(cfg.rounds())
		}
		if cfg.ExtraTime != nil {
			if d := cfg.ExtraTime(t); d > 0 {
				w.extra = d.Milliseconds()
			}
		}
	}
	return w
}

// rounds is Config.Rounds with its default.
func (cfg Config) rounds() int { return max(cfg.Rounds, 1) }

// extraIn reports whether Extra runs in round (from 1): the last one, or
// every one with ExtraEachRound.
func (cfg Config) extraIn(round int) bool { return round == cfg.rounds() || cfg.ExtraEachRound }

// poolTarget is one target's rounds as one: each cell's results pooled
// (workload.Pool), in the order of the first round, and the first error
// (its round named when there were several).
func poolTarget(runs []report.Target) report.Target {
	if len(runs) == 1 {
		return runs[0]
	}
	out := report.Target{Name: runs[0].Name}
	type cell struct {
		op      workload.Op
		clients int
	}
	var order []cell
	byCell := map[cell][]workload.Result{}
	for k, tr := range runs {
		if tr.Version != "" {
			out.Version = tr.Version
		}
		if out.Error == "" && tr.Error != "" {
			out.Error = fmt.Sprintf("round %d: %s", k+1, tr.Error)
		}
		for _, r := range tr.Results {
			c := cell{r.Op, r.Clients}
			if _, ok := byCell[c]; !ok {
				order = append(order, c)
			}
			byCell[c] = append(byCell[c], r)
		}
	}
	for _, c := range order {
		out.Results = append(out.Results, workload.Pool(byCell[c]))
	}
	return out
}

// runTarget starts t, runs the matrix and stops t; with extra, it runs
// Config.Extra too. begin says whether the next cell is the Extra,
// progress how far the cell is, next that it ended.
func runTarget(ctx context.Context, cfg Config, t target.Target, rep *report.Report, extra bool,
	describe func(string), begin func(extra bool), progress func(float64), next func()) report.Target {
	tr := report.Target{Name: t.Name()}
	describe(t.Name() + ": starting")
	eps, err := t.Start(ctx)
	if err != nil {
		tr.Error = err.Error()
		return tr
	}
	defer func() {
		if err := t.Stop(); err != nil && tr.Error == "" {
			tr.Error = "stop: " + err.Error()
		}
	}()
	tr.Version = t.Version()
	for _, op := range cfg.Ops {
		for _, clients := range cfg.Clients {
			describe(fmt.Sprintf("%s %s ×%d", t.Name(), op, clients))
			begin(false)
			// A target that dies mid-run would hold a cell forever: the
			// client waits for a connection that never comes back.
			cctx, cancel := cfg.cellContext(ctx)
			res, err := workload.Run(cctx, eps, workload.Spec{
				Op: op, Clients: clients, Duration: cfg.Duration, Ops: cfg.OpCount,
				Warmup: cfg.Warmup, Seed: cfg.Seed, ValueSize: cfg.ValueSize,
				Prefix: keyPrefix, Progress: progress,
			})
			if err != nil && cctx.Err() != nil && ctx.Err() == nil {
				err = fmt.Errorf("no answer within %s (did the target stop?): %w", cfg.cellLimit(), err)
			}
			cancel()
			next()
			if err != nil {
				tr.Error = fmt.Sprintf("%s with %d clients: %v", op, clients, err)
				return tr
			}
			tr.Results = append(tr.Results, res)
		}
	}
	if cfg.Extra != nil && extra {
		describe(t.Name() + ": extra benchmarks")
		begin(true)
		err := cfg.Extra(ctx, t, eps, rep, func(desc string, frac float64) {
			describe(desc)
			progress(frac)
		})
		next()
		if err != nil {
			tr.Error = "extra: " + err.Error()
		}
	}
	return tr
}

// ParseClients parses "1,8,64".
func ParseClients(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d", &n); err != nil || n <= 0 {
			return nil, fmt.Errorf("bad client count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// DefaultWorkDir makes a fresh directory for the targets' data.
func DefaultWorkDir() (string, error) { return os.MkdirTemp("", "dyad-bench-") }
