package twozone

import (
	"fmt"
	"html/template"
	"io"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"github.com/dyad-db/dyad/internal/bench/report"
)

// bucket is the time resolution of the timeline plots.
const bucket = 100 * time.Millisecond

// rateSeries counts the acknowledged writes through each zone per bucket,
// x in seconds since t0.
func rateSeries(samples []sample, t0 time.Time) [2]plotter.XYs {
	var counts [2][]float64
	for _, s := range samples {
		if !s.write || !s.ok || s.end.Before(t0) {
			continue
		}
		i := int(s.end.Sub(t0) / bucket)
		for len(counts[s.zone]) <= i {
			counts[s.zone] = append(counts[s.zone], 0)
		}
		counts[s.zone][i]++
	}
	n := max(len(counts[0]), len(counts[1]))
	var out [2]plotter.XYs
	for z := range out {
		for i := range n {
			v := 0.0
			if i < len(counts[z]) {
				v = counts[z][i]
			}
			out[z] = append(out[z], plotter.XY{X: (time.Duration(i) * bucket).Seconds(), Y: v})
		}
	}
	return out
}

// writeFigure writes one titled plot as HTML.
func writeFigure(w io.Writer, title string, p *plot.Plot) error {
	svg, err := report.SVG(p)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "<div class=\"fig\"><h3>%s</h3>%s</div>\n", template.HTMLEscapeString(title), svg)
	return err
}

// linePlot is a plot with the given axis labels and named lines.
func linePlot(xLabel, yLabel string, lines ...any) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.Legend.Top = true
	if err := plotutil.AddLines(p, lines...); err != nil {
		return nil, err
	}
	return p, nil
}
