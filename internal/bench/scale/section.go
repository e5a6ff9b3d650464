package scale

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
)

// Result is the report section: one row per target.
type Result struct {
	Config Config `json:"config"`
	Rows   []Row  `json:"rows"`
}

// Bench runs the profile as (part of) a bench.Config.Extra.
type Bench struct {
	Config Config
	result *Result // the one section every target adds a row to
}

// Expected is the profile's share of the progress bar on t.
func (b *Bench) Expected(t target.Target) time.Duration {
	if !Applies(t) {
		return 0
	}
	return b.Config.Expected()
}

// Run measures t if the profile applies to it and adds its row. Called
// once per round (bench.Config.ExtraEachRound), it adds one row per round,
// numbered from 1.
func (b *Bench) Run(ctx context.Context, t target.Target, eps []string, rep *report.Report, progress func(string, float64)) error {
	if !Applies(t) {
		return nil
	}
	if b.result == nil {
		cfg := b.Config
		cfg.Progress = nil
		b.result = &Result{Config: cfg}
		rep.Sections = append(rep.Sections, b.result)
		if rep.Extras == nil {
			rep.Extras = map[string]any{}
		}
		rep.Extras[Profile] = b.result
	}
	cfg := b.Config
	cfg.Progress = progress
	row, err := Run(ctx, t, eps, cfg)
	row.Round = 1 + len(b.result.rounds(t.Name()))
	b.result.Rows = append(b.result.Rows, row)
	return err
}

func (*Result) Title() string { return "At scale" }

// baselines pairs each dyad target with the etcd it is compared with.
var baselines = map[string]string{"dyad": "etcd-1", "dyad-pair": "etcd-3"}

// rounds is every row of the target name, in the order measured.
func (r *Result) rounds(name string) []Row {
	var out []Row
	for _, row := range r.Rows {
		if row.Target == name {
			out = append(out, row)
		}
	}
	return out
}

// find is the rows of the target name that did not fail (false: none).
func (r *Result) find(name string) ([]Row, bool) {
	var ok []Row
	for _, row := range r.rounds(name) {
		if row.Err == "" {
			ok = append(ok, row)
		}
	}
	return ok, len(ok) > 0
}

// targets is the targets of the rows, in the order of their first row.
func (r *Result) targets() []string {
	var out []string
	for _, row := range r.Rows {
		if !slices.Contains(out, row.Target) {
			out = append(out, row.Target)
		}
	}
	return out
}

// pooled is a figure over a target's rounds: its median (the lower
// middle value of an even count), its smallest and its largest.
func pooled(rows []Row, value func(Row) float64) (med, lo, hi float64) {
	vs := make([]float64, len(rows))
	for i, row := range rows {
		vs[i] = value(row)
	}
	slices.Sort(vs)
	return vs[(len(vs)-1)/2], vs[0], vs[len(vs)-1]
}

// Kinds of figure.
const (
	seconds = iota
	perSecond
	count
)

// figures are the rows of the section: name, value (seconds, a rate or a
// count) and its kind.
var figures = []struct {
	name  string
	value func(Row) float64
	kind  int
}{
	{"time to serve after restart", func(r Row) float64 { return r.Serve.Seconds() }, seconds},
	{"client port open after restart", func(r Row) float64 { return r.PortOpen.Seconds() }, seconds},
	{"get p50 (1 client)", func(r Row) float64 { return r.Get.P50.Seconds() }, seconds},
	{"get p99 (1 client)", func(r Row) float64 { return r.Get.P99.Seconds() }, seconds},
	{"put rate, no watcher", func(r Row) float64 { return r.PutRate }, perSecond},
	{"put rate under the watchers", func(r Row) float64 { return r.PutRateWatched }, perSecond},
	{"watch events delivered", func(r Row) float64 { return float64(r.WatchLag.N) }, count},
	{"watch lag p50", func(r Row) float64 { return r.WatchLagSend.P50.Seconds() }, seconds},
	{"watch lag p99", func(r Row) float64 { return r.WatchLagSend.P99.Seconds() }, seconds},
	{"watch lag max", func(r Row) float64 { return r.WatchLagSend.Max.Seconds() }, seconds},
	{"watch lag p50 from the ack", func(r Row) float64 { return r.WatchLag.P50.Seconds() }, seconds},
	{"watch lag p99 from the ack", func(r Row) float64 { return r.WatchLag.P99.Seconds() }, seconds},
	{"watch lag max from the ack", func(r Row) float64 { return r.WatchLag.Max.Seconds() }, seconds},
	{"paced: puts acknowledged", func(r Row) float64 { return r.PacedPutRate }, perSecond},
	{"paced: put p50", func(r Row) float64 { return r.PacedPut.P50.Seconds() }, seconds},
	{"paced: put p99", func(r Row) float64 { return r.PacedPut.P99.Seconds() }, seconds},
	{"paced: watch events delivered", func(r Row) float64 { return float64(r.PacedLag.N) }, count},
	{"paced: watch lag p50", func(r Row) float64 { return r.PacedLag.P50.Seconds() }, seconds},
	{"paced: watch lag p99", func(r Row) float64 { return r.PacedLag.P99.Seconds() }, seconds},
	{"paced: watch lag max", func(r Row) float64 { return r.PacedLag.Max.Seconds() }, seconds},
	{"paced: watch lag p50 from the ack", func(r Row) float64 { return r.PacedLagAck.P50.Seconds() }, seconds},
	{"paced: watch lag p99 from the ack", func(r Row) float64 { return r.PacedLagAck.P99.Seconds() }, seconds},
	{"put p50 alone", func(r Row) float64 { return r.Put.P50.Seconds() }, seconds},
	{"put p99 alone", func(r Row) float64 { return r.Put.P99.Seconds() }, seconds},
	{"put p50 during the LIST storm", func(r Row) float64 { return r.PutStorm.P50.Seconds() }, seconds},
	{"put p99 during the LIST storm", func(r Row) float64 { return r.PutStorm.P99.Seconds() }, seconds},
	{"LIST pages read", func(r Row) float64 { return float64(r.ListPages) }, count},
	{"LIST first page p50", func(r Row) float64 { return r.Pages.P50.Seconds() }, seconds},
	{"LIST first page p99", func(r Row) float64 { return r.Pages.P99.Seconds() }, seconds},
	{"load time", func(r Row) float64 { return r.Load.Seconds() }, seconds},
}

func fmtFigure(v float64, kind int) string {
	switch kind {
	case perSecond:
		return fmt.Sprintf("%.0f/s", v)
	case count:
		return fmt.Sprintf("%.0f", v)
	}
	d := time.Duration(v * 1e9)
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
}

func (r *Result) Markdown(w io.Writer) error {
	var b strings.Builder
	c := r.Config
	fmt.Fprintf(&b, "%d pod-shaped objects of %d bytes on each target; %s per phase; %d writers updating random objects; %d watchers, as many on each of the objects' 100 namespaces (16 watch streams); %d listers reading it all in pages of %d. Time to serve: every process stopped with SIGTERM and started again, until a linearizable read and a write both succeed. ",
		c.Objects, c.ObjectSize, c.Duration, c.Writers, c.Watchers, c.Listers, c.PageSize)
	b.WriteString("Under the watchers, two phases, each giving the watch lag from each put's send (what a client sees between its write and the watchers' event) and, for the fan-out alone, from its acknowledgement (0 if delivered first): closed-loop (the writers as fast as the target acknowledges, so a faster target is timed at a higher load) ")
	if c.WatchRate > 0 {
		fmt.Fprintf(&b, "and paced (%d puts/s issued open-loop, whatever the target's speed, so every target's lag is measured at the same load). ", c.WatchRate)
	} else {
		b.WriteString("and paced (skipped: no rate given). ")
	}
	cols := r.targets()
	many := slices.ContainsFunc(cols, func(name string) bool { return len(r.rounds(name)) > 1 })
	if many {
		b.WriteString("The targets took turns over several rounds, each on a freshly started and loaded target: every figure is the median of a target's rounds that did not fail, with the smallest and largest in brackets, and each ratio compares medians. ")
	}
	b.WriteString("Ratios are dyad ÷ etcd-1 and dyad-pair ÷ etcd-3 (below 1 is better for times, above 1 for rates).\n\n")
	b.WriteString("| figure | " + strings.Join(cols, " | ") + " | dyad ÷ etcd-1 | dyad-pair ÷ etcd-3 |\n|---|")
	b.WriteString(strings.Repeat("--:|", len(cols)+2) + "\n")
	for _, f := range figures {
		fmt.Fprintf(&b, "| %s |", f.name)
		for _, name := range cols {
			rows, ok := r.find(name)
			if !ok {
				b.WriteString(" failed |")
				continue
			}
			med, lo, hi := pooled(rows, f.value)
			if len(rows) > 1 {
				fmt.Fprintf(&b, " %s (%s–%s) |", fmtFigure(med, f.kind), fmtFigure(lo, f.kind), fmtFigure(hi, f.kind))
				continue
			}
			fmt.Fprintf(&b, " %s |", fmtFigure(med, f.kind))
		}
		for _, d := range []string{"dyad", "dyad-pair"} {
			dr, ok1 := r.find(d)
			br, ok2 := r.find(baselines[d])
			if ok1 && ok2 {
				dm, _, _ := pooled(dr, f.value)
				if bm, _, _ := pooled(br, f.value); bm != 0 {
					fmt.Fprintf(&b, " %.2f× |", dm/bm)
					continue
				}
			}
			b.WriteString(" — |")
		}
		b.WriteString("\n")
	}
	for _, row := range r.Rows {
		if len(r.rounds(row.Target)) > 1 {
			row.Target = fmt.Sprintf("%s (round %d)", row.Target, row.Round)
		}
		if row.Retries > 0 {
			fmt.Fprintf(&b, "\n%s: %d requests retried after a transient error (no leader, unavailable", row.Target, row.Retries)
			if row.TimedOut > 0 {
				fmt.Fprintf(&b, "; %d of them puts answered \"request timed out\"", row.TimedOut)
			}
			b.WriteString(").\n")
		}
		if row.Missed > 0 {
			fmt.Fprintf(&b, "\n%s: %d watch events not delivered within 10 s of the last write.\n", row.Target, row.Missed)
		}
		if row.PacedMissed > 0 {
			fmt.Fprintf(&b, "\n%s: %d paced watch events not delivered within 10 s of the last put.\n", row.Target, row.PacedMissed)
		}
		if row.PacedHeld > 0 {
			fmt.Fprintf(&b, "\n%s: %d paced puts held back behind %d awaiting acknowledgement (the target did not keep up with the rate).\n", row.Target, row.PacedHeld, maxInFlight)
		}
		if row.Err != "" {
			fmt.Fprintf(&b, "\n%s failed: %s\n", row.Target, strings.ReplaceAll(row.Err, "\n", " "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Result) HTML(w io.Writer) error { return report.PreHTML(w, r.Markdown) }
