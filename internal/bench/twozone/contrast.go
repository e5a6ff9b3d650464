package twozone

import (
	"context"
	"fmt"
	"time"

	"github.com/dyad-db/dyad/internal/bench/target"
)

// ContrastRow is one system's answer to the zone loss.
type ContrastRow struct {
	Target  string `json:"target"`
	Version string `json:"version"`
	Fault   string `json:"fault"`
	// Frozen: no write succeeded within the window after the kill.
	Frozen bool `json:"frozen"`
	// Outage is kill → first acknowledged write, when not frozen.
	Outage time.Duration `json:"outage_ns,omitempty"`
	Window time.Duration `json:"window_ns"`
	// Recovery is revive → first acknowledged write.
	Recovery time.Duration `json:"recovery_ns,omitempty"`
	Acked    int           `json:"acked"`
	// Lost is acknowledged writes missing 3 s after writes resumed;
	// LostAtFirst those missing at the first read back, just after.
	Lost        int      `json:"lost"`
	LostAtFirst int      `json:"lost_at_first"`
	LostKeys    []string `json:"lost_keys,omitempty"`
	// LostAckedAt is when each of LostKeys was acknowledged, relative to
	// the kill (negative: before it).
	LostAckedAt []time.Duration `json:"lost_acked_at_ns,omitempty"`
	Err         string          `json:"error,omitempty"`
}

// ContrastResult is the section with every faulty target's row.
type ContrastResult struct {
	Rows []ContrastRow `json:"rows"`
}

// Contrast applies f's zone loss under write load: it waits cfg.Window
// for writes, revives what it killed, waits for writes again and checks
// that every acknowledged write is there.
func Contrast(ctx context.Context, f target.Faulty, eps []string, cfg Config) (ContrastRow, error) {
	row := ContrastRow{Target: f.Name(), Version: f.Version(), Fault: f.Fault(), Window: cfg.Window}
	prefix := cfg.Prefix + "contrast/"
	tr, err := startTraffic(ctx, trafficSpec{Endpoints: [][]string{eps}, Writers: cfg.Writers,
		Prefix: prefix, ValueSize: cfg.ValueSize, Timeout: time.Second, Probe: probeEvery})
	if err != nil {
		return row, err
	}
	defer tr.stop()
	fail := func(err error) (ContrastRow, error) {
		row.Err = err.Error()
		return row, err
	}
	since := time.Now()
	if err := waitUntil(ctx, func() bool { _, ok := tr.first(0, true, since); return ok }); err != nil {
		return fail(fmt.Errorf("no write before the fault: %w", err))
	}
	if err := sleep(ctx, cfg.Settle); err != nil {
		return fail(err)
	}
	cfg.progress(f.Name()+": "+f.Fault(), 0.2)
	kill := time.Now()
	f.Kill()
	reaped := time.Now()
	var first time.Time
	err = waitUntilFor(ctx, cfg.Window, func() bool {
		var ok bool
		first, ok = tr.first(0, true, reaped)
		return ok
	})
	if ctx.Err() != nil {
		return fail(ctx.Err())
	}
	if err != nil {
		row.Frozen = true
	} else {
		row.Outage = first.Sub(kill)
	}
	cfg.progress(f.Name()+": reviving", 0.6)
	revive := time.Now()
	if err := f.Revive(); err != nil {
		return fail(err)
	}
	if err := waitUntil(ctx, func() bool { var ok bool; first, ok = tr.first(0, true, revive); return ok }); err != nil {
		return fail(fmt.Errorf("no write after the revival: %w", err))
	}
	row.Recovery = first.Sub(revive)
	acked := tr.ackedKeys()
	row.Acked = len(acked)
	cli, err := newClient(eps)
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	lost, err := missing(ctx, cli, prefix, acked)
	if err != nil {
		return fail(fmt.Errorf("reading back: %w", err))
	}
	row.LostAtFirst = len(lost)
	if len(lost) > 0 {
		// A system may serve reads from a view that lags a restart;
		// give it time before calling a write lost.
		if err := sleep(ctx, 3*time.Second); err != nil {
			return fail(err)
		}
		if lost, err = missing(ctx, cli, prefix, acked); err != nil {
			return fail(fmt.Errorf("reading back: %w", err))
		}
	}
	row.Lost = len(lost)
	row.LostKeys = lost[:min(len(lost), 10)]
	for _, k := range row.LostKeys {
		row.LostAckedAt = append(row.LostAckedAt, tr.ackTime(k).Sub(kill))
	}
	cfg.progress(f.Name()+": contrast done", 1)
	return row, nil
}
