package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/workload"
)

// Baselines are the targets each dyad figure is compared with, when the run
// has them: etcd with three members (the study's layout) and kine over
// PostgreSQL.
var Baselines = []string{"etcd-3", "kine-pg"}

// Report is one benchmark run.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Seed     uint64    `json:"seed"`
	// Duration of each measured cell, or Ops per cell when > 0.
	Duration time.Duration `json:"duration_ns"`
	Ops      int64         `json:"ops,omitempty"`
	Machine  Machine       `json:"machine"`
	Targets  []Target      `json:"targets"`
	Notes    []string      `json:"notes,omitempty"`
	// Sections are rendered after the request tables (see the package
	// comment). Not part of results.json: a section's data goes in Extras.
	Sections []Section `json:"-"`
	// Extras holds the results of the benchmarks behind Sections, by name
	// ("failover/dyad-pair"), for results.json.
	Extras map[string]any `json:"extras,omitempty"`
}

// Target is one system's results.
type Target struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	// Error is set when the target could not be started or failed a run;
	// its results then stop there.
	Error   string            `json:"error,omitempty"`
	Results []workload.Result `json:"results"`
}

// Section is an extra part of the report.
type Section interface {
	Title() string
	Markdown(w io.Writer) error
	HTML(w io.Writer) error // an HTML fragment
}

// Files written by Write.
const (
	JSONFile     = "results.json"
	MarkdownFile = "summary.md"
	HTMLFile     = "index.html"
)

// Write renders the report into dir.
func (r *Report) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, JSONFile), b, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	if err := r.Markdown(&md); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, MarkdownFile), []byte(md.String()), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, HTMLFile))
	if err != nil {
		return err
	}
	if err := r.HTML(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Load reads a results.json.
func Load(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Report
	return &r, json.Unmarshal(b, &r)
}

// Find returns target name's result for (op, clients), if measured.
func (r *Report) Find(name string, op workload.Op, clients int) (workload.Result, bool) {
	for _, t := range r.Targets {
		if t.Name != name {
			continue
		}
		for _, res := range t.Results {
			if res.Op == op && res.Clients == clients {
				return res, true
			}
		}
	}
	return workload.Result{}, false
}

// cells lists the (op, clients) pairs measured on any target, in run order.
func (r *Report) cells() []workload.Result {
	var out []workload.Result
	for _, t := range r.Targets {
		for _, res := range t.Results {
			if !slices.ContainsFunc(out, func(o workload.Result) bool { return o.Op == res.Op && o.Clients == res.Clients }) {
				out = append(out, workload.Result{Op: res.Op, Clients: res.Clients})
			}
		}
	}
	return out
}

func (r *Report) hasTarget(name string) bool {
	return slices.ContainsFunc(r.Targets, func(t Target) bool { return t.Name == name && t.Error == "" || t.Name == name && len(t.Results) > 0 })
}

// Ratio is a dyad figure divided by a baseline's, for one cell.
type Ratio struct {
	Baseline string
	// Lat is dyad p50 / baseline p50 and Tail dyad p99 / baseline p99
	// (below 1: dyad is faster); Thr is dyad ops/s / baseline ops/s
	// (above 1: dyad does more). NaN when either side did not measure.
	Lat, Tail, Thr float64
	// Why explains a NaN ("unsupported by kine-pg", "not run").
	Why string
}

// Ratios compares dyad target name's cell with each baseline of the run.
func (r *Report) Ratios(name string, res workload.Result) []Ratio {
	var out []Ratio
	for _, b := range Baselines {
		if !r.hasTarget(b) {
			continue
		}
		ratio := Ratio{Baseline: b, Lat: math.NaN(), Tail: math.NaN(), Thr: math.NaN()}
		base, ok := r.Find(b, res.Op, res.Clients)
		switch {
		case !ok:
			ratio.Why = "not run on " + b
		case base.Unsupported != "":
			ratio.Why = "unsupported by " + b
		case res.Unsupported != "" || res.Ops == 0 || base.Ops == 0:
			ratio.Why = "no figure"
		default:
			ratio.Lat = res.P50US / base.P50US
			ratio.Tail = res.P99US / base.P99US
			ratio.Thr = res.Throughput / base.Throughput
		}
		out = append(out, ratio)
	}
	return out
}

func fmtUS(us float64) string {
	switch {
	case us >= 100_000:
		return fmt.Sprintf("%.0f ms", us/1000)
	case us >= 1000:
		return fmt.Sprintf("%.2f ms", us/1000)
	default:
		return fmt.Sprintf("%.0f µs", us)
	}
}

// FmtRatio formats a ratio as "0.87×", NaN (nothing to compare) as "—".
func FmtRatio(v float64) string {
	if math.IsNaN(v) {
		return "—"
	}
	return fmt.Sprintf("%.2f×", v)
}
