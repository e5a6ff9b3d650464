package twozone

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// DelayRow is one system with its zones one delay apart: puts from one
// client (latency) and from DelayClients clients (throughput).
type DelayRow struct {
	System  string        `json:"system"` // the undelayed target's name
	Target  string        `json:"target"`
	Version string        `json:"version,omitempty"`
	Delay   time.Duration `json:"delay_ns"` // one way
	// One is put at 1 client, Many at DelayClients clients.
	One  workload.Result `json:"one"`
	Many workload.Result `json:"many"`
	Err  string          `json:"error,omitempty"`
}

// DelayResult is the section with every delayed run, dyad-pair's and
// etcd-3's.
type DelayResult struct {
	Clients int        `json:"clients"` // of the throughput column
	Rows    []DelayRow `json:"rows"`
}

// delaySystems are the targets the delay benchmark runs shaped copies of.
var delaySystems = []string{"dyad-pair", "etcd-3"}

// Delay starts system (dyad-pair or etcd-3) once per cfg.Delays with its
// zones (etcd: every pair of members) that far apart each way through the
// userspace shaper, and measures puts on it. A run that fails is a row
// with its error; the error returned joins them.
func Delay(ctx context.Context, system string, env target.Env, cfg Config) ([]DelayRow, error) {
	var rows []DelayRow
	var errs []error
	for i, d := range cfg.Delays {
		frac := func(f float64) {
			cfg.progress(fmt.Sprintf("%s %v apart", system, d), (float64(i)+f)/float64(len(cfg.Delays)))
		}
		row, err := delayRun(ctx, system, d, env, cfg, frac)
		rows = append(rows, row)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", row.Target, err))
			if ctx.Err() != nil {
				break
			}
		}
	}
	return rows, errors.Join(errs...)
}

func delayRun(ctx context.Context, system string, d time.Duration, env target.Env, cfg Config, frac func(float64)) (row DelayRow, err error) {
	name := fmt.Sprintf("%s@%v", system, d)
	row = DelayRow{System: system, Target: name, Delay: d}
	defer func() {
		if err != nil {
			row.Err = err.Error()
		}
	}()
	t, err := target.New(name, env)
	if err != nil {
		return row, err
	}
	eps, err := t.Start(ctx)
	if err != nil {
		return row, err
	}
	defer func() { err = errors.Join(err, t.Stop()) }()
	row.Version = t.Version()
	for j, clients := range []int{1, cfg.DelayClients} {
		res, err := workload.Run(ctx, eps, workload.Spec{
			Op: workload.Put, Clients: clients, Duration: cfg.DelayDuration, Warmup: time.Second,
			Seed: 1, ValueSize: cfg.ValueSize, Prefix: cfg.Prefix + "delay/",
			Progress: func(f float64) { frac((float64(j) + f) / 2) },
		})
		if err != nil {
			return row, fmt.Errorf("put with %d clients: %w", clients, err)
		}
		if j == 0 {
			row.One = res
		} else {
			row.Many = res
		}
	}
	return row, nil
}

func (*DelayResult) Title() string { return "Distance between the zones" }

// find is system's row at delay d.
func (r *DelayResult) find(system string, d time.Duration) (DelayRow, bool) {
	for _, row := range r.Rows {
		if row.System == system && row.Delay == d && row.Err == "" {
			return row, true
		}
	}
	return DelayRow{}, false
}

// delays lists the delays measured, in run order.
func (r *DelayResult) delays() []time.Duration {
	var out []time.Duration
	for _, row := range r.Rows {
		if !containsDur(out, row.Delay) {
			out = append(out, row.Delay)
		}
	}
	return out
}

func containsDur(ds []time.Duration, d time.Duration) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

func (r *DelayResult) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Puts with the zones apart: every frame between dyad-pair's two nodes, and between any two of etcd-3's members, waits the given delay each way in a userspace shaper (this kernel has no netem). Clients reach each node directly. \"0s\" goes through the shaper without a delay: what the shaper itself costs. Ratios are dyad-pair over etcd-3 at the same delay (latency below 1 and throughput above 1 favour dyad).\n\n")
	fmt.Fprintf(&b, "| one-way delay | system | put p50, 1 client | put p99, 1 client | put ops/s, %d clients | p50 vs etcd-3 | p99 vs etcd-3 | ops/s vs etcd-3 |\n|--:|---|--:|--:|--:|--:|--:|--:|\n", r.Clients)
	for _, d := range r.delays() {
		for _, sys := range delaySystems {
			row, ok := r.find(sys, d)
			if !ok {
				for _, x := range r.Rows {
					if x.System == sys && x.Delay == d && x.Err != "" {
						fmt.Fprintf(&b, "| %v | %s | failed: %s | | | | | |\n", d, sys, oneLine(x.Err))
					}
				}
				continue
			}
			lat, tail, thr := "", "", ""
			if base, ok := r.find("etcd-3", d); ok && sys != "etcd-3" {
				lat = ratio(row.One.P50US, base.One.P50US)
				tail = ratio(row.One.P99US, base.One.P99US)
				thr = ratio(row.Many.Throughput, base.Many.Throughput)
			}
			fmt.Fprintf(&b, "| %v | %s | %s | %s | %.0f | %s | %s | %s |\n", d, sys,
				fmtDur(usDur(row.One.P50US)), fmtDur(usDur(row.One.P99US)), row.Many.Throughput, lat, tail, thr)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *DelayResult) HTML(w io.Writer) error {
	if err := report.PreHTML(w, r.Markdown); err != nil {
		return err
	}
	var lat, thr []any
	for _, sys := range delaySystems {
		var l, t plotter.XYs
		for _, d := range r.delays() {
			if row, ok := r.find(sys, d); ok {
				x := float64(d) / 1e6
				l = append(l, plotter.XY{X: x, Y: row.One.P50US / 1000})
				t = append(t, plotter.XY{X: x, Y: row.Many.Throughput})
			}
		}
		if len(l) > 0 {
			lat = append(lat, sys, l)
			thr = append(thr, sys, t)
		}
	}
	if len(lat) == 0 {
		return nil
	}
	p, err := linePlot("one-way delay between zones (ms)", "put p50, 1 client (ms)", lat...)
	if err != nil {
		return err
	}
	if err := writeFigure(w, "Put latency against the distance between the zones", p); err != nil {
		return err
	}
	if p, err = linePlot("one-way delay between zones (ms)", fmt.Sprintf("put ops/s, %d clients", r.Clients), thr...); err != nil {
		return err
	}
	return writeFigure(w, "Put throughput against the distance between the zones", p)
}

func usDur(us float64) time.Duration { return time.Duration(us * 1e3) }
