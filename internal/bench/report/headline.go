package report

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/dyad-db/dyad/internal/bench/workload"
)

// headline is the report's one-table answer: dyad's and dyad-pair's key
// figures beside etcd-3's and kine-pg's, with the ratios. It reads the
// report when rendered, so it sees every target measured.
type headline struct{ r *Report }

// Headline returns the section that summarises r's key ratios.
func Headline(r *Report) Section { return headline{r} }

func (headline) Title() string { return "Headline ratios" }

// headlineRow is one figure: a latency percentile at one client, or the
// highest throughput over the client counts.
type headlineRow struct {
	label string
	op    workload.Op
	// pct is the latency percentile (50, 99); 0 means throughput.
	pct float64
}

var headlineRows = []headlineRow{
	{"read latency p50 (range-l, 1 client)", workload.RangeL, 50},
	{"read latency p99 (range-l, 1 client)", workload.RangeL, 99},
	{"k8s read latency p50 (k8s-get, 1 client)", workload.K8sGet, 50},
	{"write latency p50 (put, 1 client)", workload.Put, 50},
	{"write latency p99 (put, 1 client)", workload.Put, 99},
	{"k8s update latency p50 (k8s-update, 1 client)", workload.K8sUpdate, 50},
	{"throughput, best over clients (put)", workload.Put, 0},
	{"throughput, best over clients (range-l)", workload.RangeL, 0},
	{"throughput, best over clients (k8s-mix)", workload.K8sMix, 0},
	{"throughput, best over clients (phase-steady)", workload.PhaseSteady, 0},
	{"throughput, best over clients (phase-burst)", workload.PhaseBurst, 0},
}

// value is the row's figure on target name: µs for latency, ops/s for
// throughput; NaN when not measured or unsupported.
func (h headline) value(name string, row headlineRow) float64 {
	best := math.NaN()
	for _, t := range h.r.Targets {
		if t.Name != name {
			continue
		}
		for _, res := range t.Results {
			if res.Op != row.op || res.Unsupported != "" || res.Ops == 0 {
				continue
			}
			switch {
			case row.pct == 0:
				if math.IsNaN(best) || res.Throughput > best {
					best = res.Throughput
				}
			case res.Clients == 1 && row.pct == 50:
				best = res.P50US
			case res.Clients == 1 && row.pct == 99:
				best = res.P99US
			}
		}
	}
	return best
}

// table builds the header and the cells (formatted) of the section.
func (h headline) table() (hdr []string, rows [][]string) {
	var dyads, bases []string
	for _, n := range []string{"dyad", "dyad-pair"} {
		if h.r.hasTarget(n) {
			dyads = append(dyads, n)
		}
	}
	for _, n := range Baselines {
		if h.r.hasTarget(n) {
			bases = append(bases, n)
		}
	}
	hdr = append([]string{"figure"}, dyads...)
	hdr = append(hdr, bases...)
	for _, d := range dyads {
		for _, b := range bases {
			hdr = append(hdr, d+" ÷ "+b)
		}
	}
	for _, row := range headlineRows {
		cells := []string{row.label}
		fmtv := func(v float64) string {
			switch {
			case math.IsNaN(v):
				return "—"
			case row.pct == 0:
				return fmt.Sprintf("%.0f/s", v)
			default:
				return fmtUS(v)
			}
		}
		for _, n := range slices.Concat(dyads, bases) {
			cells = append(cells, fmtv(h.value(n, row)))
		}
		for _, d := range dyads {
			for _, b := range bases {
				cells = append(cells, FmtRatio(h.value(d, row)/h.value(b, row)))
			}
		}
		rows = append(rows, cells)
	}
	return hdr, rows
}

func (h headline) Markdown(w io.Writer) error {
	hdr, rows := h.table()
	var b strings.Builder
	b.WriteString("Latency ratios below 1× mean dyad is faster; throughput ratios above 1× mean dyad does more. " +
		"— means not measured or unsupported.\n\n")
	b.WriteString("| " + strings.Join(hdr, " | ") + " |\n|---" + strings.Repeat("|--:", len(hdr)-1) + "|\n")
	for _, r := range rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

var headlineHTML = template.Must(template.New("h").Parse(`<p>Latency ratios below 1× mean dyad is faster; throughput ratios above 1× mean dyad does more. — means not measured or unsupported.</p>
<table><tr>{{range .Hdr}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr>{{range .}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
`))

func (h headline) HTML(w io.Writer) error {
	hdr, rows := h.table()
	return headlineHTML.Execute(w, struct {
		Hdr  []string
		Rows [][]string
	}{hdr, rows})
}
