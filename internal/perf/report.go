package perf

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// RTT is a round-trip summary.
type RTT struct {
	Count              int
	P50, P90, P99, Max time.Duration
	Mean               time.Duration `json:",omitempty"`
}

// Tput is a throughput summary (MB = 10^6 bytes of payload).
type Tput struct {
	Count int
	Rate  float64 // samples/s
	MBps  float64
}

// Row is one measured system (ddsperf or one of dyad's receive paths) at
// one sample size. A zero RTT or Tput means "not measured".
type Row struct {
	System string
	Size   int
	RTT    RTT
	Tput   Tput
	// AckMean (dyad-pair only) is the primary's mean time from publishing
	// a batch to the replica's acknowledgement of it, over the round
	// trips: the part of a write spent on the wire and in the replica.
	AckMean time.Duration `json:",omitempty"`
	// Path (dyad-ddsnet only) splits the mean round trip into layers.
	Path *NetPath `json:",omitempty"`
	// Writes (dyad rows but the pair's) splits the pinger's writes.
	Writes *WriteSplit `json:",omitempty"`
	Err    string      `json:",omitempty"`
}

// Results is a whole run.
type Results struct {
	Start    time.Time
	Host     string
	Baseline string // System name of the baseline (ddsperf)
	Config   string // Cyclone XML of the pinger's side
	Rows     []Row
}

func (r *Results) find(system string, size int) (Row, bool) {
	for _, x := range r.Rows {
		if x.System == system && x.Size == size {
			return x, true
		}
	}
	return Row{}, false
}

func ratio(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

func dur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1fµs", float64(d)/1e3)
}

func header() []string {
	return []string{"system", "size", "p50", "p90", "p99", "max", "p50 ÷ ddsperf", "p99 ÷ ddsperf", "samples/s", "MB/s", "tput ÷ ddsperf"}
}

func (r *Results) cells() [][]string {
	var out [][]string
	for _, x := range r.Rows {
		b, _ := r.find(r.Baseline, x.Size)
		c := []string{x.System, fmt.Sprint(x.Size), dur(x.RTT.P50), dur(x.RTT.P90), dur(x.RTT.P99), dur(x.RTT.Max),
			ratio(float64(x.RTT.P50), float64(b.RTT.P50)), ratio(float64(x.RTT.P99), float64(b.RTT.P99)),
			"-", "-", ratio(x.Tput.Rate, b.Tput.Rate)}
		if x.Tput.Rate > 0 {
			c[8], c[9] = fmt.Sprintf("%.0f", x.Tput.Rate), fmt.Sprintf("%.1f", x.Tput.MBps)
		}
		if x.Err != "" {
			c[2] = "error (below)"
		}
		out = append(out, c)
	}
	return out
}

// SecureSuffix marks a system's secured variant ("dyad-ddsnet +sec"): the
// same system with DDS Security on, measured in the same run.
const SecureSuffix = " +sec"

func secureHeader() []string {
	return []string{"system", "size", "p50 sec ÷ plain", "p99 sec ÷ plain", "tput sec ÷ plain"}
}

// secureCells pairs every secured row with its plain row of the same size.
func (r *Results) secureCells() [][]string {
	var out [][]string
	for _, x := range r.Rows {
		plain, ok := strings.CutSuffix(x.System, SecureSuffix)
		if !ok || x.Err != "" {
			continue
		}
		p, found := r.find(plain, x.Size)
		if !found || p.Err != "" {
			continue
		}
		out = append(out, []string{plain, fmt.Sprint(x.Size), ratio(float64(x.RTT.P50), float64(p.RTT.P50)),
			ratio(float64(x.RTT.P99), float64(p.RTT.P99)), ratio(x.Tput.Rate, p.Tput.Rate)})
	}
	return out
}

// WriteTable writes a plain-text table (ratios are dyad ÷ baseline of the
// same size and run; lower is better for latency, higher for throughput).
func (r *Results) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header(), "\t")+"\t")
	for _, c := range r.cells() {
		fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
	}
	if l := r.layerCells(); len(l) > 0 {
		fmt.Fprintln(tw, "\nWhere a pair's write goes (means, same run):")
		fmt.Fprintln(tw, strings.Join(layerHeader(), "\t")+"\t")
		for _, c := range l {
			fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
		}
	}
	if l := r.netPathCells(); len(l) > 0 {
		fmt.Fprintln(tw, "\nWhere a ddsnet round trip goes (means, ping and pong summed):")
		fmt.Fprintln(tw, strings.Join(netPathHeader(), "\t")+"\t")
		for _, c := range l {
			fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
		}
	}
	if l := r.writeSplitCells(); len(l) > 0 {
		fmt.Fprintln(tw, "\nWhere a ping's write goes (the pinger's writes; means, then medians):")
		fmt.Fprintln(tw, strings.Join(writeSplitHeader(), "\t")+"\t")
		for _, c := range l {
			fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
		}
	}
	if sec := r.secureCells(); len(sec) > 0 {
		fmt.Fprintln(tw, "\nDDS Security cost (same run):")
		fmt.Fprintln(tw, strings.Join(secureHeader(), "\t")+"\t")
		for _, c := range sec {
			fmt.Fprintln(tw, strings.Join(c, "\t")+"\t")
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	r.writeErrors(w)
	return nil
}

// writeErrors lists the failures the tables only flag, so a long message
// does not widen every row.
func (r *Results) writeErrors(w io.Writer) {
	for _, x := range r.Rows {
		if x.Err != "" {
			fmt.Fprintf(w, "\n%s (size %d): %s\n", x.System, x.Size, x.Err)
		}
	}
}

// WriteMarkdown writes the same table in Markdown.
func (r *Results) WriteMarkdown(w io.Writer) error {
	fmt.Fprintf(w, "# dyad perf, %s on %s\n\n", r.Start.UTC().Format(time.RFC3339), r.Host)
	fmt.Fprintln(w, "Round trips (ping-pong) and RELIABLE KEEP_ALL throughput over a veth pair between two network namespaces;")
	fmt.Fprintf(w, "ratios are against %s at the same size in the same run.\n\n", r.Baseline)
	h := header()
	fmt.Fprintf(w, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, c := range r.cells() {
		fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
	}
	if l := r.layerCells(); len(l) > 0 {
		h := layerHeader()
		fmt.Fprintf(w, "\nWhere a pair's write goes, means in the same run (primary = put − publish→ack, replica = publish→ack − ddsnet):\n\n| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
		for _, c := range l {
			fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
		}
	}
	if l := r.netPathCells(); len(l) > 0 {
		h := netPathHeader()
		fmt.Fprintf(w, "\nWhere a ddsnet round trip goes, means in the same run, ping and pong summed (write: Send; deliver: to the peer's notification; wake: to its consumer running; take: to the message in hand; turn: the responder's; unaccounted: mean − layers):\n\n| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
		for _, c := range l {
			fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
		}
	}
	if l := r.writeSplitCells(); len(l) > 0 {
		h := writeSplitHeader()
		fmt.Fprintf(w, "\nWhere a ping's write goes, the pinger's writes in the same run, means then medians (write: the caller's whole write; caller: its own work around the cgo call; cgo: the call's entry and exit; on-CPU and off-CPU: dds_write's wall time on and off the CPU; context switches inside dds_write per write; preempted: writes with an involuntary one):\n\n| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
		for _, c := range l {
			fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
		}
	}
	if sec := r.secureCells(); len(sec) > 0 {
		h := secureHeader()
		fmt.Fprintf(w, "\nDDS Security cost, secured ÷ plain in the same run:\n\n| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
		for _, c := range sec {
			fmt.Fprintf(w, "| %s |\n", strings.Join(c, " | "))
		}
	}
	r.writeErrors(w)
	return nil
}

// Save writes results.json, results.md and rtt.svg into dir.
func (r *Results) Save(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), j, 0o644); err != nil {
		return err
	}
	var md strings.Builder
	r.WriteMarkdown(&md)
	if err := os.WriteFile(filepath.Join(dir, "results.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	return r.plot(filepath.Join(dir, "rtt.svg"))
}

// plot draws p50 RTT against sample size, one line per system.
func (r *Results) plot(path string) error {
	p := plot.New()
	p.Title.Text = "dyad perf: round-trip p50 vs sample size"
	p.X.Label.Text = "sample size (bytes)"
	p.Y.Label.Text = "RTT p50 (µs)"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	var args []any
	seen := map[string]bool{}
	for _, x := range r.Rows {
		if seen[x.System] {
			continue
		}
		seen[x.System] = true
		var pts plotter.XYs
		for _, y := range r.Rows {
			if y.System == x.System && y.RTT.P50 > 0 {
				pts = append(pts, plotter.XY{X: float64(y.Size), Y: float64(y.RTT.P50) / 1e3})
			}
		}
		if len(pts) > 0 {
			args = append(args, x.System, pts)
		}
	}
	if len(args) > 0 {
		if err := plotutil.AddLinePoints(p, args...); err != nil {
			return err
		}
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}

// Summarise sorts d and returns its percentiles.
func Summarise(d []time.Duration) RTT {
	if len(d) == 0 {
		return RTT{}
	}
	slices.Sort(d)
	pct := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return RTT{Count: len(d), P50: pct(.5), P90: pct(.9), P99: pct(.99), Max: d[len(d)-1], Mean: sum / time.Duration(len(d))}
}

// PairSystem is the row of the whole replication path (two dyad nodes),
// and NetSystem the row of the transport alone; the layer table splits
// the first by the second.
const (
	PairSystem = "dyad-pair"
	NetSystem  = "dyad-ddsnet"
)

func layerHeader() []string {
	return []string{"system", "size", "put", "publish→ack", "primary", "ddsnet", "replica"}
}

// layerCells splits each pair row's mean write (put) into the primary's
// own part (put − publish→ack: propose, apply, log, answer), the
// transport's round trip (the ddsnet row's mean at the same size and
// variant) and the replica's own part (publish→ack − ddsnet: take,
// apply, persist, acknowledge). Means, since parts of percentiles do
// not add up.
func (r *Results) layerCells() [][]string {
	var out [][]string
	for _, x := range r.Rows {
		suffix, ok := strings.CutPrefix(x.System, PairSystem)
		if !ok || x.Err != "" || x.AckMean == 0 || x.RTT.Mean == 0 {
			continue
		}
		net, _ := r.find(NetSystem+suffix, x.Size)
		c := []string{x.System, fmt.Sprint(x.Size), dur(x.RTT.Mean), dur(x.AckMean), dur(x.RTT.Mean - x.AckMean), "-", "-"}
		if net.Err == "" && net.RTT.Mean > 0 {
			c[5], c[6] = dur(net.RTT.Mean), dur(x.AckMean-net.RTT.Mean)
		}
		out = append(out, c)
	}
	return out
}
