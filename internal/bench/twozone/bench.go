package twozone

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
)

// Profile names `dyad bench --profile` accepts for this package's
// benchmarks; "two-zone" is all of them.
const (
	ProfileFailover    = "failover"
	ProfileReplication = "replication"
	ProfileLoad        = "load"
	ProfileContrast    = "contrast"
	ProfileDelay       = "delay"
	ProfileAll         = "two-zone"
)

// Profiles lists them in the order they run on a target.
var Profiles = []string{ProfileReplication, ProfileFailover, ProfileLoad, ProfileContrast, ProfileDelay}

// Bench is the selection `dyad bench` runs after each target's request
// matrix (bench.Config.Extra): the dyad-pair benchmarks on dyad-pair, the
// contrast on every target.Faulty, the delay benchmark on dyad-pair and
// etcd-3 (it starts shaped copies of them, built from Env).
type Bench struct {
	Selected []string // of Profiles
	Config   Config
	Env      target.Env
	contrast *ContrastResult // the one section every faulty target adds a row to
	delay    *DelayResult    // the one section dyad-pair and etcd-3 add rows to
}

// SplitProfiles separates this package's profiles from a --profile list;
// rest keeps the others in order. "all" selects every profile of both
// kinds, so `dyad bench` with no flags runs everything.
func SplitProfiles(list string) (mine, rest []string) {
	for _, p := range strings.Split(list, ",") {
		p = strings.TrimSpace(p)
		switch {
		case p == "":
		case p == ProfileAll || p == "all":
			// "all" also keeps its meaning for the request profiles.
			if p == "all" {
				rest = append(rest, p)
			}
			for _, q := range Profiles {
				if !slices.Contains(mine, q) {
					mine = append(mine, q)
				}
			}
		case slices.Contains(Profiles, p):
			if !slices.Contains(mine, p) {
				mine = append(mine, p)
			}
		default:
			rest = append(rest, p)
		}
	}
	return mine, rest
}

func (b *Bench) has(p string) bool { return slices.Contains(b.Selected, p) }

// Expected is roughly how long Run takes on t (bench.Config.ExtraTime),
// for the progress bar: each benchmark's own length plus what its rounds
// wait for on a healthy pair (a failover round: the outage, a second of new
// writes and the resync, about 6 s beyond its settle time).
func (b *Bench) Expected(t target.Target) time.Duration {
	cfg := b.Config
	var d time.Duration
	if len(cfg.Delays) > 0 && b.has(ProfileDelay) && slices.Contains(delaySystems, t.Name()) {
		// A start, then two cells with a second's warm-up each, per delay.
		d += time.Duration(len(cfg.Delays)) * (15*time.Second + 2*(cfg.DelayDuration+time.Second))
	}
	if _, ok := t.(*target.Pair); ok {
		if b.has(ProfileReplication) {
			d += cfg.Duration + 5*time.Second
		}
		if b.has(ProfileFailover) {
			d += time.Duration(cfg.Kills) * (cfg.Settle + 6*time.Second)
		}
		if b.has(ProfileLoad) {
			d += cfg.LoadDuration + 5*time.Second
		}
		return d
	}
	if _, ok := t.(target.Faulty); ok && b.has(ProfileContrast) {
		d += cfg.Window + 20*time.Second // the fault, the window, the revival
	}
	return d
}

// Run is a bench.Config.Extra: it runs the selected benchmarks that apply
// to t and adds their sections to rep. A fault a peer system does not
// survive is a result; an error means a benchmark could not run.
func (b *Bench) Run(ctx context.Context, t target.Target, eps []string, rep *report.Report, progress func(string, float64)) error {
	cfg := b.Config
	var errs []error
	add := func(name string, s report.Section) {
		rep.Sections = append(rep.Sections, s)
		if rep.Extras == nil {
			rep.Extras = map[string]any{}
		}
		rep.Extras[name+"/"+t.Name()] = s
	}
	if len(cfg.Delays) > 0 && b.has(ProfileDelay) && slices.Contains(delaySystems, t.Name()) {
		if b.delay == nil {
			b.delay = &DelayResult{Clients: cfg.DelayClients}
			rep.Sections = append(rep.Sections, b.delay)
			if rep.Extras == nil {
				rep.Extras = map[string]any{}
			}
			rep.Extras[ProfileDelay] = b.delay
		}
		dcfg := cfg
		dcfg.Progress = progress
		rows, err := Delay(ctx, t.Name(), b.Env, dcfg)
		b.delay.Rows = append(b.delay.Rows, rows...)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", ProfileDelay, err))
		}
		if ctx.Err() != nil {
			return errors.Join(errs...)
		}
	}
	if p, ok := t.(*target.Pair); ok {
		var parts []string
		for _, q := range []string{ProfileReplication, ProfileFailover, ProfileLoad} {
			if b.has(q) {
				parts = append(parts, q)
			}
		}
		for i, q := range parts {
			cfg.Progress = func(desc string, frac float64) { progress(desc, (float64(i)+frac)/float64(len(parts))) }
			var err error
			switch q {
			case ProfileReplication:
				var r *ReplicationResult
				if r, err = Replication(ctx, p, cfg); r != nil {
					add(q, r)
				}
			case ProfileFailover:
				var r *FailoverResult
				if r, err = Failover(ctx, p, cfg); r != nil {
					add(q, r)
				}
			case ProfileLoad:
				var r *LoadResult
				if r, err = Loaded(ctx, p, cfg); r != nil {
					add(q, r)
				}
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", q, err))
				if ctx.Err() != nil {
					break
				}
			}
		}
		return errors.Join(errs...)
	}
	if f, ok := t.(target.Faulty); ok && b.has(ProfileContrast) {
		if b.contrast == nil {
			b.contrast = &ContrastResult{}
			rep.Sections = append(rep.Sections, b.contrast)
			if rep.Extras == nil {
				rep.Extras = map[string]any{}
			}
			rep.Extras[ProfileContrast] = b.contrast
		}
		cfg.Progress = progress
		row, err := Contrast(ctx, f, eps, cfg)
		b.contrast.Rows = append(b.contrast.Rows, row)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
