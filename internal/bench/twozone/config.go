package twozone

import (
	"fmt"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
)

// Config sizes every benchmark of this package.
type Config struct {
	// Kills is the number of primaries the failover series kills.
	Kills int
	// Settle is how long the pair runs under load before each kill.
	Settle time.Duration
	// Writers and Readers per zone.
	Writers, Readers int
	// Duration of the replication measurement.
	Duration time.Duration
	// LoadDuration is how long the pair runs with CPU hogs (false
	// failovers).
	LoadDuration time.Duration
	// Window is how long the contrast waits for writes after the kill.
	Window time.Duration
	// Delays are the one-way delays between the zones the delay
	// benchmark runs dyad-pair and etcd-3 at (0: through the shaper, no
	// delay).
	Delays []time.Duration
	// DelayDuration is the measured time of each of its cells, and
	// DelayClients the client count of its throughput cell.
	DelayDuration time.Duration
	DelayClients  int
	// ValueSize of every written value (bytes).
	ValueSize int
	// Prefix starts every key written.
	Prefix string
	// Progress, when set, is told what runs and the fraction done (0..1).
	Progress func(desc string, frac float64)
}

// OutageTarget is the failover outage the study asks for.
const OutageTarget = 2 * time.Second

// LagBound is the study's bound on replica lag (M3).
const LagBound = 500 * time.Millisecond

// waitTimeout bounds each wait for the pair to form, a failover or a resync.
const waitTimeout = 60 * time.Second

func (c Config) progress(desc string, frac float64) {
	if c.Progress != nil {
		c.Progress(desc, min(max(frac, 0), 1))
	}
}

// Dist summarises durations (report.Dist).
type Dist = report.Dist

func distOf(ds []time.Duration) Dist { return report.DistOf(ds) }

func fmtDur(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	case d >= 100*time.Millisecond:
		return fmt.Sprintf("%.0f ms", float64(d)/1e6)
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/1e6)
	default:
		return fmt.Sprintf("%d µs", d.Microseconds())
	}
}

func passFail(ok bool) string {
	if ok {
		return "pass"
	}
	return "FAIL"
}
