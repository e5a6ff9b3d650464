package report

import (
	"bytes"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/dyad-db/dyad/internal/bench/workload"
)

// figure is one embedded plot.
type figure struct {
	Title string
	SVG   template.HTML
}

// HTML writes the page: the Markdown summary's facts as HTML tables, then
// throughput-versus-clients and latency-CDF plots per operation.
func (r *Report) HTML(w io.Writer) error {
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		return err
	}
	var figs []figure
	for _, op := range r.ops() {
		svg, err := r.throughputPlot(op)
		if err != nil {
			return err
		}
		if svg != "" {
			figs = append(figs, figure{fmt.Sprintf("%s: throughput vs clients", op), svg})
		}
		for _, c := range r.cells() {
			if c.Op != op {
				continue
			}
			svg, err := r.cdfPlot(op, c.Clients)
			if err != nil {
				return err
			}
			if svg != "" {
				figs = append(figs, figure{fmt.Sprintf("%s, %d clients: latency CDF", op, c.Clients), svg})
			}
		}
	}
	var sections []template.HTML
	for _, s := range r.Sections {
		var b bytes.Buffer
		fmt.Fprintf(&b, "<h2>%s</h2>\n", template.HTMLEscapeString(s.Title()))
		if err := s.HTML(&b); err != nil {
			return err
		}
		sections = append(sections, template.HTML(b.String()))
	}
	return page.Execute(w, struct {
		R        *Report
		Summary  string
		Figures  []figure
		Sections []template.HTML
	}{r, md.String(), figs, sections})
}

// page shows the Markdown summary verbatim (it is already a readable table
// layout) above the plots, so the two renderings cannot disagree.
var page = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>dyad bench {{.R.Started.Format "2006-01-02 15:04"}}</title>
<style>
body{font-family:sans-serif;max-width:1100px;margin:auto;padding:1em}
pre{background:#f6f6f6;padding:1em;overflow-x:auto;font-size:12px}
.fig{display:inline-block;margin:.5em;vertical-align:top}
.fig h3{font-size:14px;margin:.2em 0}
</style></head><body>
<h1>dyad bench</h1>
<details open><summary>Summary (summary.md)</summary><pre>{{.Summary}}</pre></details>
<h2>Plots</h2>
{{range .Figures}}<div class="fig"><h3>{{.Title}}</h3>{{.SVG}}</div>
{{end}}
{{range .Sections}}{{.}}
{{end}}
</body></html>
`))

func (r *Report) ops() []workload.Op {
	var ops []workload.Op
	for _, c := range r.cells() {
		if !slices.Contains(ops, c.Op) {
			ops = append(ops, c.Op)
		}
	}
	return ops
}

// throughputPlot draws ops/s against clients, one line per target that
// measured op. Empty when no target measured it at two client counts.
func (r *Report) throughputPlot(op workload.Op) (template.HTML, error) {
	p := plot.New()
	p.X.Label.Text = "clients"
	p.Y.Label.Text = "requests/s"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Legend.Left = true
	var args []any
	for _, t := range r.Targets {
		var xy plotter.XYs
		for _, res := range t.Results {
			if res.Op == op && res.Unsupported == "" && res.Ops > 0 {
				xy = append(xy, plotter.XY{X: float64(res.Clients), Y: res.Throughput})
			}
		}
		if len(xy) < 2 {
			continue
		}
		slices.SortFunc(xy, func(a, b plotter.XY) int { return int(a.X - b.X) })
		args = append(args, t.Name, xy)
	}
	if len(args) == 0 {
		return "", nil
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return "", err
	}
	return svg(p)
}

// cdfPlot draws each target's latency distribution for one cell: x is the
// latency (log scale), y the fraction of requests at or below it.
func (r *Report) cdfPlot(op workload.Op, clients int) (template.HTML, error) {
	p := plot.New()
	p.X.Label.Text = "latency (ms)"
	p.Y.Label.Text = "fraction of requests ≤ x"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1
	p.Legend.Top = false
	p.Legend.Left = false
	var args []any
	for _, t := range r.Targets {
		res, ok := r.Find(t.Name, op, clients)
		if !ok || res.Unsupported != "" || res.Hist == nil {
			continue
		}
		h := res.Histogram()
		var xy plotter.XYs
		for _, br := range h.CumulativeDistribution() {
			if br.Count == 0 || br.ValueAt <= 0 {
				continue
			}
			xy = append(xy, plotter.XY{X: float64(br.ValueAt) / 1000, Y: br.Quantile / 100})
		}
		if len(xy) == 0 {
			continue
		}
		args = append(args, t.Name, xy)
	}
	if len(args) == 0 {
		return "", nil
	}
	if err := plotutil.AddLines(p, args...); err != nil {
		return "", err
	}
	return svg(p)
}

// SVG renders a plot as an inline SVG element, for sections' plots.
func SVG(p *plot.Plot) (template.HTML, error) { return svg(p) }

func svg(p *plot.Plot) (template.HTML, error) {
	wt, err := p.WriterTo(6*vg.Inch, 4*vg.Inch, "svg")
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if _, err := wt.WriteTo(&b); err != nil {
		return "", err
	}
	s := b.String()
	// Drop the XML prolog: the SVG is inlined into HTML.
	if i := strings.Index(s, "<svg"); i > 0 {
		s = s[i:]
	}
	return template.HTML(s), nil // produced by gonum/plot from numbers and target names
}
