package perf

import (
	"fmt"
	"time"
)

// WriteSample is one stamped write of a pinger (see dds.WriteStamp):
// Send is the caller's whole write (ddsnet's Send, or the binding's
// Write), Call the cgo call within it, Write dds_write's wall time within
// that, CPU the thread's CPU time within dds_write, and Voluntary and
// Involuntary the thread's context switches within dds_write.
type WriteSample struct {
	Send, Call, Write, CPU time.Duration
	Voluntary, Involuntary int64
}

// WriteSplit splits the pinger's writes of a row's round trips (the
// ping's direction only) into the caller's own work (Send − Call), the
// cgo call's entry and exit with the C-side stamps (Call − Write),
// Cyclone's write on the CPU (CPU) and off it (Write − CPU).
type WriteSplit struct {
	Count     int
	Mean, P50 WriteLayers
	// Voluntary and Involuntary are the mean context switches per write
	// inside dds_write; Preempted the fraction of writes with at least
	// one involuntary switch.
	Voluntary, Involuntary, Preempted float64
	// Stamp is what the stamping alone costs (a stamped call around no
	// write, medians on the pinger's thread): Cgo, OnCPU, OffCPU and the
	// counts include it once per write.
	Stamp WriteLayers
}

// WriteLayers are the parts of one write.
type WriteLayers struct {
	Send, Caller, Cgo, OnCPU, OffCPU time.Duration
}

// SplitWrites summarises stamped writes (nil when there are none); stamp
// is a stamping around no write (dds.StampCost). Each layer's median is
// taken on its own, so medians do not add up; means do.
func SplitWrites(ws []WriteSample, stamp WriteSample) *WriteSplit {
	if len(ws) == 0 {
		return nil
	}
	s := &WriteSplit{Count: len(ws), Stamp: WriteLayers{Send: stamp.Call, Cgo: stamp.Call - stamp.Write, OnCPU: stamp.CPU,
		OffCPU: stamp.Write - stamp.CPU}}
	var send, caller, cgo, on, off []time.Duration
	for _, w := range ws {
		send = append(send, w.Send)
		caller = append(caller, w.Send-w.Call)
		cgo = append(cgo, w.Call-w.Write)
		on = append(on, w.CPU)
		off = append(off, w.Write-w.CPU)
		s.Voluntary += float64(w.Voluntary)
		s.Involuntary += float64(w.Involuntary)
		if w.Involuntary > 0 {
			s.Preempted++
		}
	}
	n := float64(len(ws))
	s.Voluntary, s.Involuntary, s.Preempted = s.Voluntary/n, s.Involuntary/n, s.Preempted/n
	for _, l := range []struct {
		d         []time.Duration
		mean, p50 *time.Duration
	}{{send, &s.Mean.Send, &s.P50.Send}, {caller, &s.Mean.Caller, &s.P50.Caller}, {cgo, &s.Mean.Cgo, &s.P50.Cgo},
		{on, &s.Mean.OnCPU, &s.P50.OnCPU}, {off, &s.Mean.OffCPU, &s.P50.OffCPU}} {
		sum := Summarise(l.d)
		*l.mean, *l.p50 = sum.Mean, sum.P50
	}
	return s
}

func writeSplitHeader() []string {
	return []string{"system", "size", "of", "write", "caller", "cgo", "on-CPU", "off-CPU", "vcsw/write", "ivcsw/write", "preempted"}
}

// writeSplitCells gives three lines (means, medians, the stamping's own
// cost) per row that carries a WriteSplit.
func (r *Results) writeSplitCells() [][]string {
	var out [][]string
	for _, x := range r.Rows {
		s := x.Writes
		if s == nil || s.Count == 0 || x.Err != "" {
			continue
		}
		for _, v := range []struct {
			of string
			l  WriteLayers
		}{{"mean", s.Mean}, {"p50", s.P50}, {"stamp", s.Stamp}} {
			c := []string{x.System, fmt.Sprint(x.Size), v.of, signedDur(v.l.Send), signedDur(v.l.Caller), signedDur(v.l.Cgo),
				signedDur(v.l.OnCPU), signedDur(v.l.OffCPU)}
			if v.of == "stamp" {
				c = append(c, "-", "-", "-")
			} else {
				c = append(c, fmt.Sprintf("%.2f", s.Voluntary), fmt.Sprintf("%.2f", s.Involuntary), fmt.Sprintf("%.0f%%", 100*s.Preempted))
			}
			out = append(out, c)
		}
	}
	return out
}
