package twozone

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"gonum.org/v1/plot/plotter"
)

func (r *ReplicationResult) Title() string {
	return "dyad-pair replication (M1 replication latency, M3 replica lag, reads under write load)"
}

func latencyRow(b *strings.Builder, name string, d Dist) {
	if d.N == 0 {
		fmt.Fprintf(b, "| %s | 0 | | | | | |\n", name)
		return
	}
	fmt.Fprintf(b, "| %s | %d | %s | %s | %s | %s | %s |\n", name, d.N, fmtDur(d.P50), fmtDur(d.P90), fmtDur(d.P99), fmtDur(d.P999), fmtDur(d.Max))
}

// LagPass is the M3 verdict: every write reached the other zone within
// LagBound, and none went undelivered.
func (r *ReplicationResult) LagPass() bool {
	return r.All.N > 0 && r.All.Max <= LagBound && r.Undelivered == 0
}

func (r *ReplicationResult) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s of writes through both zones (zone %s primary), %d acknowledged. Replication latency: from a write's acknowledgement to its writer until a watch on the other zone's node delivers it (%d deliveries came before the acknowledgement and count as 0).\n\n",
		r.Duration.Round(100*time.Millisecond), r.Primary, r.Writes, r.Early)
	b.WriteString("| replication latency | n | p50 | p90 | p99 | p99.9 | max |\n|---|--:|--:|--:|--:|--:|--:|\n")
	latencyRow(&b, "written through the primary, seen on the replica", r.Latency[0])
	latencyRow(&b, "written through the replica, seen on the primary", r.Latency[1])
	latencyRow(&b, "all", r.All)
	fmt.Fprintf(&b, "\n**M3 replica lag** (the same distribution) against the study's %s bound: max %s, p99 %s, %d undelivered → **%s**. The primary's dyad_replication_lag_revisions over %d samples: p50 %.0f, p99 %.0f, max %.0f revisions.\n\n",
		fmtDur(LagBound), fmtDur(r.All.Max), fmtDur(r.All.P99), r.Undelivered, passFail(r.LagPass()), r.LagRevisions.N, r.LagRevisions.P50, r.LagRevisions.P99, r.LagRevisions.Max)
	b.WriteString("| request under this write load | node | n | p50 | p90 | p99 | p99.9 |\n|---|---|--:|--:|--:|--:|--:|\n")
	for z := range 2 {
		for _, x := range []struct {
			name string
			l    Latency
		}{{"linearizable read", r.Reads[z]}, {"put", r.Puts[z]}} {
			if x.l.N == 0 {
				continue
			}
			fmt.Fprintf(&b, "| %s | %c (%s) | %d | %s | %s | %s | %s |\n", x.name, 'a'+z, x.l.Role, x.l.N, fmtDur(x.l.P50), fmtDur(x.l.P90), fmtDur(x.l.P99), fmtDur(x.l.P999))
		}
	}
	writeHash(&b, r.Hash)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHash(b *strings.Builder, h Hash) {
	if h.Err != "" {
		fmt.Fprintf(b, "\nHashKV afterwards: %s.\n", h.Err)
		return
	}
	verdict := "equal"
	if !h.Equal {
		verdict = "DIFFERENT"
	}
	fmt.Fprintf(b, "\nHashKV afterwards at revision %d: zone a %08x, zone b %08x (%s).\n", h.Revision, h.Hashes[0], h.Hashes[1], verdict)
}

func (r *ReplicationResult) HTML(w io.Writer) error {
	if err := report.PreHTML(w, r.Markdown); err != nil {
		return err
	}
	if len(r.series) == 0 {
		return nil
	}
	// Per bucket, the highest lag of the writes acknowledged in it.
	var maxes plotter.XYs
	for _, pt := range r.series {
		x := (pt.at / bucket * bucket).Seconds()
		y := float64(pt.lag) / 1e6
		if n := len(maxes); n > 0 && maxes[n-1].X == x {
			maxes[n-1].Y = max(maxes[n-1].Y, y)
			continue
		}
		maxes = append(maxes, plotter.XY{X: x, Y: y})
	}
	bound := plotter.XYs{{X: 0, Y: float64(LagBound) / 1e6}, {X: maxes[len(maxes)-1].X, Y: float64(LagBound) / 1e6}}
	p, err := linePlot("seconds", "replica lag (ms), highest per 100 ms", "lag", maxes, "0.5 s bound", bound)
	if err != nil {
		return err
	}
	return writeFigure(w, "Replica lag over time", p)
}

func (r *LoadResult) Title() string { return "dyad-pair under a loaded machine: false failovers" }

// Pass is the verdict: no false failover and no role change.
func (r *LoadResult) Pass() bool {
	return r.FalseFailovers == 0 && r.RoleChanges == 0 && r.Failovers == 0
}

func (r *LoadResult) Markdown(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%s with %d CPU hogs (one busy process per core) beside writers on both zones; load average at the end %s.\n\n",
		r.Duration.Round(time.Second), r.Hogs, r.LoadAvg)
	b.WriteString("| figure | value |\n|---|--:|\n")
	fmt.Fprintf(&b, "| writes acknowledged | %d |\n| role changes seen | %d |\n| dyad_failovers_total increase | %d |\n| dyad_false_failovers_total increase | %d |\n| dyad_solo_entered_total increase | %d |\n",
		r.Writes, r.RoleChanges, r.Failovers, r.FalseFailovers, r.SoloEntered)
	for z, l := range r.Puts {
		if l.N > 0 {
			fmt.Fprintf(&b, "| put p50 / p99 / max through %c (%s) | %s / %s / %s |\n", 'a'+z, l.Role, fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.Max))
		}
	}
	fmt.Fprintf(&b, "\nFalse failovers must be 0: **%s**.\n", passFail(r.Pass()))
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *LoadResult) HTML(w io.Writer) error { return report.PreHTML(w, r.Markdown) }

func (*ContrastResult) Title() string {
	return "Zone loss on etcd and kine (contrast to dyad's failover)"
}

func (r *ContrastResult) Markdown(w io.Writer) error {
	var b strings.Builder
	b.WriteString("The same fault as dyad-pair's failover series, applied to each system's two-zone layout under write load. \"Writes frozen\" is the expected outcome where a quorum or the only database is gone, and is a result, not a failure of the bench.\n\n")
	b.WriteString("| target | fault | outcome | recovery after restart | acked | lost (at first read back → 3 s later) | error |\n|---|---|---|--:|--:|--:|---|\n")
	for _, row := range r.Rows {
		outcome := fmt.Sprintf("writes resumed after %s", fmtDur(row.Outage))
		if row.Frozen {
			outcome = fmt.Sprintf("writes frozen (none in the %s window)", fmtDur(row.Window))
		}
		rec := ""
		if row.Recovery > 0 {
			rec = fmtDur(row.Recovery)
		}
		if row.Err != "" && row.Recovery == 0 && !row.Frozen && row.Outage == 0 {
			outcome = ""
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %d | %d → %d | %s |\n", row.Target, row.Fault, outcome, rec, row.Acked, row.LostAtFirst, row.Lost, oneLine(row.Err))
		if len(row.LostKeys) > 0 {
			var keys []string
			for i, k := range row.LostKeys {
				keys = append(keys, fmt.Sprintf("%s (acknowledged %+.0f ms from the kill)", k, float64(row.LostAckedAt[i])/1e6))
			}
			fmt.Fprintf(&b, "\n%s's missing keys (first ones): %s\n\n", row.Target, strings.Join(keys, ", "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *ContrastResult) HTML(w io.Writer) error { return report.PreHTML(w, r.Markdown) }
