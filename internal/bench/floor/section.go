package floor

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/twozone"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// Result is the floor's report section. It reads the report's put figures
// when rendered, so it sees every target measured after it.
type Result struct {
	Size    int         `json:"size"`
	Method  string      `json:"method"`
	Sync    report.Dist `json:"fdatasync"`
	SyncErr string      `json:"fdatasync_error,omitempty"`
	Trips   []Trip      `json:"round_trips"`
	// RefName names the reference round trip of the Trips (none when
	// empty).
	RefName string `json:"reference,omitempty"`
	rep     *report.Report
}

// Trip is the round trip measured in one layout.
type Trip struct {
	Layout
	RTT report.Dist `json:"rtt"`
	Err string      `json:"error,omitempty"`
	// Ref is the reference round trip in the same namespaces, for
	// comparison; not part of the floor.
	Ref    report.Dist `json:"reference_rtt"`
	RefErr string      `json:"reference_error,omitempty"`
}

// Floor is one fdatasync's p50 plus one round trip's p50 in layout l; ok
// is false when either was not measured.
func (r *Result) Floor(l Layout) (d time.Duration, ok bool) {
	return r.floorWith(l, func(t Trip) (report.Dist, string) { return t.RTT, t.Err })
}

// RefFloor is Floor with the reference's round trip instead.
func (r *Result) RefFloor(l Layout) (d time.Duration, ok bool) {
	return r.floorWith(l, func(t Trip) (report.Dist, string) { return t.Ref, t.RefErr })
}

// floorWith is the fdatasync's p50 plus the p50 of the round trip that
// trip picks from layout l's Trip.
func (r *Result) floorWith(l Layout, trip func(Trip) (report.Dist, string)) (time.Duration, bool) {
	if r.SyncErr != "" || r.Sync.N == 0 {
		return 0, false
	}
	for _, t := range r.Trips {
		if d, err := trip(t); t.Layout == l && err == "" && d.N > 0 {
			return r.Sync.P50 + d.P50, true
		}
	}
	return 0, false
}

// Put is one system's put latency at one client, in one layout.
type Put struct {
	System string // the target's name (dyad-pair, etcd-3@2ms, ...)
	// Delayed marks a row of the delay profile rather than of the
	// request matrix.
	Delayed  bool
	Layout   Layout
	P50, P99 time.Duration
}

// name is how the tables show p.
func (p Put) name() string {
	if p.Delayed {
		return p.System + " (delay profile)"
	}
	return p.System
}

// Puts lists the put latencies at one client of rep: every target of the
// request matrix that measured put at one client, then the delay
// profile's rows (package twozone), in run order.
func Puts(rep *report.Report) []Put {
	var out []Put
	for _, t := range rep.Targets {
		if res, ok := rep.Find(t.Name, workload.Put, 1); ok && res.Unsupported == "" && res.Ops > 0 {
			out = append(out, Put{System: t.Name, Layout: LayoutOf(t.Name), P50: us(res.P50US), P99: us(res.P99US)})
		}
	}
	if d, ok := rep.Extras[twozone.ProfileDelay].(*twozone.DelayResult); ok {
		for _, row := range d.Rows {
			if row.Err == "" && row.One.Ops > 0 {
				out = append(out, Put{System: fmt.Sprintf("%s@%v", row.System, row.Delay), Delayed: true,
					Layout: Shaped(row.Delay), P50: us(row.One.P50US), P99: us(row.One.P99US)})
			}
		}
	}
	return out
}

func us(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }

// baseline is the etcd-3 put each row is also compared with: etcd-3's
// in the same layout, from the same part of the run (the matrix or the
// delay profile).
const baseline = "etcd-3"

// baseOf finds p's baseline in puts.
func baseOf(p Put, puts []Put) (Put, bool) {
	for _, q := range puts {
		sys, _, _ := strings.Cut(q.System, "@")
		if sys == baseline && q.Layout == p.Layout && q.Delayed == p.Delayed {
			return q, true
		}
	}
	return Put{}, false
}

// ratio is a/b as the report formats ratios; "—" when b is zero.
func ratio(a, b time.Duration) string {
	if b <= 0 {
		return report.FmtRatio(math.NaN())
	}
	return report.FmtRatio(float64(a) / float64(b))
}

// putHeader is the put table's header; the reference's column only when
// the run has one.
func (r *Result) putHeader() []string {
	h := []string{"system", "floor's layout", "put p50", "put p99", "p50 ÷ floor", "p99 ÷ floor"}
	if r.RefName != "" {
		h = append(h, "p50 ÷ floor with "+r.RefName)
	}
	return append(h, "p50 ÷ fdatasync", "p50 ÷ etcd-3")
}

// putCells are the rows of the put table (putHeader).
func (r *Result) putCells(puts []Put) [][]string {
	var out [][]string
	for _, p := range puts {
		floor, _ := r.Floor(p.Layout) // 0 when not measured: ratio shows —
		var sync time.Duration
		if r.SyncErr == "" {
			sync = r.Sync.P50
		}
		vsBase := "—"
		if b, ok := baseOf(p, puts); ok && b != p {
			vsBase = ratio(p.P50, b.P50)
		}
		row := []string{p.name(), p.Layout.String(), fmtDur(p.P50), fmtDur(p.P99), ratio(p.P50, floor), ratio(p.P99, floor)}
		if r.RefName != "" {
			ref, _ := r.RefFloor(p.Layout)
			row = append(row, ratio(p.P50, ref))
		}
		out = append(out, append(row, ratio(p.P50, sync), vsBase))
	}
	return out
}

func (*Result) Title() string { return "Write floor" }

func (r *Result) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "What a replicated write cannot cost less than on this machine, measured in this run before the first target started: "+
		"one append of a %d-byte record plus fdatasync, to a file preallocated (fallocate, %d MiB, as an etcd WAL segment) in the targets' work directory, "+
		"and one DDS round trip of a %d-byte message between two zones' network namespaces laid out as dyad-pair's (%s). "+
		"Floor = fdatasync p50 + round trip p50 in the same layout. A single node needs no round trip: its own floor is the fdatasync alone.\n\n",
		r.Size, Preallocated>>20, r.Size, r.Method)
	b.WriteString("| part | layout | n | p50 | p90 | p99 | max |\n|---|---|--:|--:|--:|--:|--:|\n")
	if r.SyncErr != "" {
		fmt.Fprintf(&b, "| append + fdatasync | work directory | failed: %s | | | | |\n", report.OneLine(r.SyncErr))
	} else {
		distRow(&b, "append + fdatasync", "work directory", r.Sync)
	}
	for _, t := range r.Trips {
		if t.Err != "" {
			fmt.Fprintf(&b, "| DDS round trip | %s | failed: %s | | | | |\n", t.Layout, report.OneLine(t.Err))
			continue
		}
		distRow(&b, "DDS round trip", t.Layout.String(), t.RTT)
		switch {
		case r.RefName == "":
		case t.RefErr != "":
			fmt.Fprintf(&b, "| %s round trip (reference) | %s | failed: %s | | | | |\n", r.RefName, t.Layout, report.OneLine(t.RefErr))
		default:
			distRow(&b, r.RefName+" round trip (reference)", t.Layout.String(), t.Ref)
		}
	}
	b.WriteString("\n| layout | floor (fdatasync p50 + round trip p50) |")
	if r.RefName != "" {
		fmt.Fprintf(&b, " with %s's round trip instead (reference) |", r.RefName)
	}
	b.WriteString("\n|---|--:|")
	if r.RefName != "" {
		b.WriteString("--:|")
	}
	b.WriteString("\n")
	for _, t := range r.Trips {
		fmt.Fprintf(&b, "| %s | %s |", t.Layout, fmtFloor(r.Floor(t.Layout)))
		if r.RefName != "" {
			fmt.Fprintf(&b, " %s |", fmtFloor(r.RefFloor(t.Layout)))
		}
		b.WriteString("\n")
	}
	puts := Puts(r.rep)
	if len(puts) > 0 {
		b.WriteString("\nPut latency at 1 client against the floor of its layout, against the fdatasync alone (a single node's floor), and against etcd-3's put in the same layout and part of the run; — means not measured.\n\n")
		h := r.putHeader()
		b.WriteString("| " + strings.Join(h, " | ") + " |\n|---|---" + strings.Repeat("|--:", len(h)-2) + "|\n")
		for _, c := range r.putCells(puts) {
			b.WriteString("| " + strings.Join(c, " | ") + " |\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// HTML shows the Markdown as preformatted text, as the page shows
// summary.md, so the two renderings cannot disagree.
func (r *Result) HTML(w io.Writer) error { return report.PreHTML(w, r.Markdown) }

func fmtFloor(d time.Duration, ok bool) string {
	if !ok {
		return "—"
	}
	return fmtDur(d)
}

func distRow(b *strings.Builder, part, layout string, d report.Dist) {
	fmt.Fprintf(b, "| %s | %s | %d | %s | %s | %s | %s |\n", part, layout, d.N, fmtDur(d.P50), fmtDur(d.P90), fmtDur(d.P99), fmtDur(d.Max))
}

// fmtDur formats a latency as the report's tables do.
func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "—"
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/1e3)
	}
}
