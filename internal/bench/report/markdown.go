package report

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// Markdown writes the summary.
func (r *Report) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# dyad bench — %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "Command: `%s`\n\n", r.Command)
	cell := fmt.Sprintf("%v measured per cell", r.Duration)
	if r.Ops > 0 {
		cell = fmt.Sprintf("%d requests per cell", r.Ops)
	}
	fmt.Fprintf(&b, "Seed %d, %s, run %s → %s.\n\n", r.Seed, cell,
		r.Started.Format("15:04:05"), r.Finished.Format("15:04:05"))

	m := r.Machine
	b.WriteString("## Machine\n\n| | |\n|---|---|\n")
	for _, kv := range [][2]string{
		{"OS", m.OS}, {"Kernel", m.Kernel}, {"CPU", m.CPU}, {"Cores", fmt.Sprint(m.Cores)},
		{"Memory", fmt.Sprintf("%.1f GiB", m.MemoryGB)}, {"Disk (data)", m.Disk}, {"Go", m.Go},
		{"Load average (start → end)", m.LoadAvg + " → " + m.LoadAvgEnd},
	} {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], kv[1])
	}
	b.WriteString("\n## Targets\n\n| target | version | status |\n|---|---|---|\n")
	for _, t := range r.Targets {
		st := "ok"
		if t.Error != "" {
			st = "failed: " + OneLine(t.Error)
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, t.Version, st)
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "\n> %s\n", n)
	}

	b.WriteString("\n## Results\n\nLatencies are per request, client-side round trips. ")
	b.WriteString("Ratios are dyad ÷ baseline from this run: for latency below 1× means dyad is faster, for throughput above 1× means dyad does more.\n")
	for _, t := range r.Targets {
		fmt.Fprintf(&b, "\n### %s\n\n%s\n\n", t.Name, t.Version)
		if t.Error != "" {
			fmt.Fprintf(&b, "**Failed:** %s\n\n", OneLine(t.Error))
		}
		if len(t.Results) == 0 {
			continue
		}
		dy := target.IsDyad(t.Name)
		hdr := "| op | clients | ops/s | p50 | p90 | p99 | p99.9 | errors |"
		sep := "|---|--:|--:|--:|--:|--:|--:|--:|"
		var bases []string
		if dy {
			for _, rt := range r.Ratios(t.Name, t.Results[0]) {
				bases = append(bases, rt.Baseline)
				hdr += fmt.Sprintf(" p50 vs %s | p99 vs %s | ops/s vs %s |", rt.Baseline, rt.Baseline, rt.Baseline)
				sep += "--:|--:|--:|"
			}
		}
		b.WriteString(hdr + "\n" + sep + "\n")
		for _, res := range t.Results {
			if res.Unsupported != "" {
				fmt.Fprintf(&b, "| %s | %d | unsupported | | | | | |", res.Op, res.Clients)
				for range bases {
					b.WriteString(" | | |")
				}
				b.WriteString("\n")
				continue
			}
			errs := fmt.Sprint(res.Errors)
			if res.Errors > 0 {
				errs += " (" + OneLine(res.FirstError) + ")"
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s | %s |", res.Op, res.Clients, fmtThroughput(res),
				fmtUS(res.P50US), fmtUS(res.P90US), fmtUS(res.P99US), fmtUS(res.P999US), errs)
			if dy {
				for _, rt := range r.Ratios(t.Name, res) {
					fmt.Fprintf(&b, " %s | %s | %s |", FmtRatio(rt.Lat), FmtRatio(rt.Tail), FmtRatio(rt.Thr))
				}
			}
			b.WriteString("\n")
		}
	}
	if _, err := io.WriteString(w, b.String()); err != nil {
		return err
	}
	for _, s := range r.Sections {
		if _, err := fmt.Fprintf(w, "\n## %s\n\n", s.Title()); err != nil {
			return err
		}
		if err := s.Markdown(w); err != nil {
			return err
		}
	}
	return nil
}

// fmtThroughput is a cell's ops/s, with the range of its rounds' when it
// pools several (dyad bench --rounds): "7686 (6903–8177)".
func fmtThroughput(res workload.Result) string {
	out := fmt.Sprintf("%.0f", res.Throughput)
	if rs := res.RoundsOpsPerS; len(rs) > 1 {
		out += fmt.Sprintf(" (%.0f–%.0f)", slices.Min(rs), slices.Max(rs))
	}
	return out
}
