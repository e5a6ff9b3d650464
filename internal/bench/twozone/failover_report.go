package twozone

import (
	"fmt"
	"io"
	"math"
	"strings"

	"gonum.org/v1/plot/plotter"

	"github.com/dyad-db/dyad/internal/bench/report"
)

func (r *FailoverResult) Title() string {
	return "dyad-pair failover (M4): kill -9 the primary under load"
}

// Failed is the number of rounds that did not complete.
func (r *FailoverResult) Failed() int {
	n := 0
	for _, k := range r.Kills {
		if k.Err != "" {
			n++
		}
	}
	return n
}

// Lost is the acknowledged writes missing in any check.
func (r *FailoverResult) Lost() int {
	n := r.LostFinal
	for _, k := range r.Kills {
		n += k.Lost + k.LostAfterRejoin
	}
	return n
}

func (r *FailoverResult) Markdown(w io.Writer) error {
	var b strings.Builder
	falseF := 0
	for _, k := range r.Kills {
		falseF += k.FalseFailovers
	}
	fmt.Fprintf(&b, "%d kills (%d did not complete). Writers and readers on both zones; each kill is SIGKILL of the node that is primary, then a restart once the survivor has taken over. The write outage runs from the kill to the first acknowledged write through the survivor that started after the kill (a fresh write starts every %v through each zone); the steady writers' outage is the same for the survivor zone's steady writers alone (each sends its next write when the previous returns, with a 3 s timeout, as a simple client does, so a write held across the kill delays it); promotion to the survivor reporting itself leading.\n\n", len(r.Kills), r.Failed(), probeEvery)
	b.WriteString("| figure | n | p50 | p90 | p99 | max | target |\n|---|--:|--:|--:|--:|--:|---|\n")
	row := func(name string, d Dist, target string) {
		if d.N == 0 {
			fmt.Fprintf(&b, "| %s | 0 | | | | | %s |\n", name, target)
			return
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s | %s |\n", name, d.N, fmtDur(d.P50), fmtDur(d.P90), fmtDur(d.P99), fmtDur(d.Max), target)
	}
	row("write outage", r.Outage, fmt.Sprintf("%s: %s", fmtDur(OutageTarget), passFail(r.Outage.N > 0 && r.Outage.Max <= OutageTarget)))
	row("steady writers' outage", r.WriterOutage, "")
	row("promotion (kill → survivor leads)", r.Promoted, "")
	row("read outage (linearizable)", r.ReadOutage, "")
	row("resync (restart → synchronous pair)", r.Resync, "")
	row("time solo per kill", r.Solo, "")
	fmt.Fprintf(&b, "\nAcknowledged writes: %d; lost: %d (%s; read back from the survivor after each failover, from the restarted node after each resync, and from both at the end). False failovers: %d.\n",
		r.Acked, r.Lost(), passFail(r.Lost() == 0), falseF)
	if r.Hash.Err != "" {
		fmt.Fprintf(&b, "HashKV after the series: %s.\n", r.Hash.Err)
	} else {
		fmt.Fprintf(&b, "HashKV after the series at revision %d: a %08x, b %08x (%s).\n", r.Hash.Revision, r.Hash.Hashes[0], r.Hash.Hashes[1], map[bool]string{true: "equal", false: "DIFFERENT"}[r.Hash.Equal])
	}
	if len(r.Phases) > 0 && r.Phases[PhaseSteady].Seconds > 0 {
		steady := r.Phases[PhaseSteady]
		b.WriteString("\nThroughput in the study's phases (M2), summed over the completed rounds: requests both zones' steady clients completed per second (the probes not counted).\n\n| phase | seconds | writes/s | reads/s | writes vs steady | reads vs steady |\n|---|--:|--:|--:|--:|--:|\n")
		for _, p := range r.Phases {
			fmt.Fprintf(&b, "| %s | %.1f | %.0f | %.0f | %s | %s |\n", p.Name, p.Seconds, p.Writes, p.Reads, ratio(p.Writes, steady.Writes), ratio(p.Reads, steady.Reads))
		}
	}
	b.WriteString("\n| # | killed | at | write outage | steady writers' outage | promotion | writes held across the kill | read outage | new writes in 1 s | lost | lost after rejoin | resync | solo | error |\n|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for i, k := range r.Kills {
		fmt.Fprintf(&b, "| %d | %s | %.1f s | %s | %s | %s | %d | %s | %d | %d | %d | %s | %s | %s |\n", i+1, k.Victim, k.At.Seconds(),
			fmtDur(k.Outage), fmtDur(k.WriterOutage), fmtDur(k.Promoted), k.Held, fmtDur(k.ReadOutage), k.NewWrites, k.Lost, k.LostAfterRejoin, fmtDur(k.Resync), fmtDur(k.Solo), oneLine(k.Err))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *FailoverResult) HTML(w io.Writer) error {
	if err := report.PreHTML(w, r.Markdown); err != nil {
		return err
	}
	rates := rateSeries(r.timeline, r.t0)
	var kills plotter.XYs
	for _, k := range r.Kills {
		kills = append(kills, plotter.XY{X: k.At.Seconds(), Y: 0})
	}
	p, err := linePlot("seconds since the series started", fmt.Sprintf("writes acknowledged per %v", bucket),
		"through zone a", rates[0], "through zone b", rates[1])
	if err != nil {
		return err
	}
	if len(kills) > 0 {
		sc, err := plotter.NewScatter(kills)
		if err != nil {
			return err
		}
		p.Add(sc)
		p.Legend.Add("kill -9", sc)
	}
	if err := writeFigure(w, "Outage timeline: acknowledged writes per zone, kills marked", p); err != nil {
		return err
	}
	var outs, target plotter.XYs
	for i, k := range r.Kills {
		if k.Err == "" {
			outs = append(outs, plotter.XY{X: float64(i + 1), Y: k.Outage.Seconds()})
		}
		target = append(target, plotter.XY{X: float64(i + 1), Y: OutageTarget.Seconds()})
	}
	if len(outs) == 0 {
		return nil
	}
	p, err = linePlot("kill", "write outage (s)", "outage", outs, "2 s target", target)
	if err != nil {
		return err
	}
	return writeFigure(w, "Write outage per kill", p)
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	return strings.ReplaceAll(s, "|", "/")
}

// ratio formats a/b as the report does ("—" when b is zero).
func ratio(a, b float64) string {
	if b == 0 {
		return report.FmtRatio(math.NaN())
	}
	return report.FmtRatio(a / b)
}
