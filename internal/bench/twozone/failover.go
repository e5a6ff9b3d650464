package twozone

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dyad-db/dyad/internal/bench/target"
)

// Kill is one round of the failover series.
type Kill struct {
	// Victim is the zone whose node was primary and was killed ("a", "b").
	Victim string `json:"victim"`
	// At is the kill's time since the series started.
	At time.Duration `json:"at_ns"`
	// Outage runs from SIGKILL to the end of the first acknowledged write
	// through the survivor that started after the killed node was reaped
	// (a fresh write starts every 20 ms, see trafficSpec.Probe).
	Outage time.Duration `json:"write_outage_ns"`
	// WriterOutage is Outage for the steady writers alone: a client that
	// sends its next write only after the previous one returned waits out
	// any write held across the kill (up to its 3 s timeout) first.
	WriterOutage time.Duration `json:"writer_outage_ns"`
	// Promoted runs from SIGKILL until the survivor reports itself leading
	// (dyad_role 2 or 3, polled every 10 ms).
	Promoted time.Duration `json:"promoted_ns"`
	// Held is the number of writes through the survivor, sent before the
	// kill, that failed after it (forwarded to the dead primary and never
	// answered within the timeout).
	Held int `json:"held"`
	// ReadOutage is the same for linearizable reads (0: no readers).
	ReadOutage time.Duration `json:"read_outage_ns,omitempty"`
	// NewWrites is the number of writes the survivor acknowledged in the
	// second after its first.
	NewWrites int `json:"new_writes"`
	// Lost is the number of writes acknowledged before the check that the
	// survivor lacks; LostAfterRejoin the number the restarted node lacks
	// once resynced.
	Lost            int `json:"lost"`
	LostAfterRejoin int `json:"lost_after_rejoin"`
	// Resync runs from the restart of the killed node until the pair is
	// synchronous again (survivor primary with the returned node as its
	// replica, so every new write is on both).
	Resync time.Duration `json:"resync_ns"`
	// Solo is the survivor's dyad_solo_seconds_total over the round.
	Solo time.Duration `json:"solo_ns"`
	// Failovers and FalseFailovers are the survivor's counters' increase.
	Failovers      int `json:"failovers"`
	FalseFailovers int `json:"false_failovers"`
	// Phases counts the requests both zones' steady clients completed in
	// the study's phases of this round (M2): steady state, a zone lost,
	// and the zone rejoining.
	Phases [numPhases]PhaseCount `json:"phases"`
	Err    string                `json:"error,omitempty"`
}

// The M2 phases of a failover round.
const (
	// PhaseSteady: the Settle period before the kill, both zones up.
	PhaseSteady = iota
	// PhaseZoneLost: from the first write the survivor acknowledged until
	// the killed node is restarted (one zone serves alone).
	PhaseZoneLost
	// PhaseRejoin: from the restart until the pair is synchronous again
	// (the returning zone catches up while both zones' clients write).
	PhaseRejoin
	numPhases
)

// PhaseNames are the report's names of the phases, by index.
var PhaseNames = [numPhases]string{"steady state", "a zone lost", "the zone rejoining"}

// PhaseCount is what both zones' steady clients (not the probes)
// completed successfully within one phase window.
type PhaseCount struct {
	Seconds float64 `json:"seconds"`
	Writes  int     `json:"writes"`
	Reads   int     `json:"reads"`
}

// PhaseRate is a phase over the whole series: its total length and the
// requests per second completed in it.
type PhaseRate struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	Writes  float64 `json:"writes_per_s"`
	Reads   float64 `json:"reads_per_s"`
}

// FailoverResult is the series.
type FailoverResult struct {
	Kills        []Kill `json:"kills"`
	Outage       Dist   `json:"write_outage"`
	WriterOutage Dist   `json:"writer_outage"`
	Promoted     Dist   `json:"promoted"`
	ReadOutage   Dist   `json:"read_outage"`
	Resync       Dist   `json:"resync"`
	Solo         Dist   `json:"solo"`
	// Acked writes over the series, and those missing at the end on either
	// node (after both are back).
	Acked     int `json:"acked"`
	LostFinal int `json:"lost_final"`
	// Hash compares both nodes at one revision after the series.
	Hash Hash `json:"hash"`
	// Phases is M2 over the completed rounds, by phase.
	Phases []PhaseRate `json:"phases"`
	// timeline is every request, for the plot; t0 the series' start.
	timeline []sample
	t0       time.Time
}

// Hash is HashKV of both nodes at one revision.
type Hash struct {
	Revision int64     `json:"revision"`
	Hashes   [2]uint32 `json:"hashes"`
	Equal    bool      `json:"equal"`
	Err      string    `json:"error,omitempty"`
}

// Failover kills the pair's primary cfg.Kills times under write (and read)
// load on both zones, restarting it after each failover. After a failover
// the survivor leads, so successive kills alternate between the zones.
func Failover(ctx context.Context, p *target.Pair, cfg Config) (*FailoverResult, error) {
	eps := p.Zones()
	prefix := cfg.Prefix + "failover/"
	tr, err := startTraffic(ctx, trafficSpec{Endpoints: [][]string{{eps[0]}, {eps[1]}},
		Writers: cfg.Writers, Readers: cfg.Readers, Prefix: prefix, ValueSize: cfg.ValueSize, Probe: probeEvery})
	if err != nil {
		return nil, err
	}
	res := &FailoverResult{t0: time.Now()}
	stopped := false
	defer func() {
		if !stopped {
			tr.stop()
		}
	}()
	for i := range cfg.Kills {
		cfg.progress(fmt.Sprintf("dyad-pair: failover %d/%d", i+1, cfg.Kills), float64(i)/float64(cfg.Kills))
		k, err := killRound(ctx, p, tr, cfg, res.t0)
		res.Kills = append(res.Kills, k)
		if err != nil {
			res.Kills[len(res.Kills)-1].Err = err.Error()
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			// A node that does not come back ends the series: later
			// rounds would measure a broken pair.
			if errors.Is(err, errNoPair) {
				break
			}
		}
	}
	tr.stop()
	stopped = true
	res.timeline = tr.timeline()
	acked := tr.ackedKeys()
	res.Acked = len(acked)
	if _, err := waitPair(ctx, p); err != nil {
		return res, err
	}
	for z, ep := range eps {
		n, err := missingOn(ctx, ep, prefix, acked)
		if err != nil {
			return res, fmt.Errorf("reading back zone %c: %w", 'a'+z, err)
		}
		res.LostFinal += n
	}
	res.Hash = compareHash(ctx, eps)
	var outs, wouts, proms, routs, resyncs, solos []time.Duration
	for _, k := range res.Kills {
		if k.Err != "" {
			continue
		}
		outs, resyncs, solos = append(outs, k.Outage), append(resyncs, k.Resync), append(solos, k.Solo)
		wouts, proms = append(wouts, k.WriterOutage), append(proms, k.Promoted)
		if k.ReadOutage > 0 {
			routs = append(routs, k.ReadOutage)
		}
	}
	res.Outage, res.ReadOutage, res.Resync, res.Solo = distOf(outs), distOf(routs), distOf(resyncs), distOf(solos)
	res.WriterOutage, res.Promoted = distOf(wouts), distOf(proms)
	res.Phases = phaseRates(res.Kills)
	cfg.progress("dyad-pair: failover done", 1)
	return res, nil
}

var errNoPair = errors.New("the pair did not form")

// phaseRates sums each phase over the completed rounds.
func phaseRates(kills []Kill) []PhaseRate {
	var sum [numPhases]PhaseCount
	for _, k := range kills {
		if k.Err != "" {
			continue
		}
		for i, c := range k.Phases {
			sum[i].Seconds += c.Seconds
			sum[i].Writes += c.Writes
			sum[i].Reads += c.Reads
		}
	}
	var out []PhaseRate
	for i, c := range sum {
		r := PhaseRate{Name: PhaseNames[i], Seconds: c.Seconds}
		if c.Seconds > 0 {
			r.Writes, r.Reads = float64(c.Writes)/c.Seconds, float64(c.Reads)/c.Seconds
		}
		out = append(out, r)
	}
	return out
}

// probeEvery is how often a fresh write starts through each zone during
// fault benchmarks: the resolution of the outage.
const probeEvery = 20 * time.Millisecond

func killRound(ctx context.Context, p *target.Pair, tr *traffic, cfg Config, t0 time.Time) (Kill, error) {
	var k Kill
	leader, err := waitPair(ctx, p)
	if err != nil {
		return k, err
	}
	// Both zones' clients must be writing again (the node killed last
	// round is back and its clients reconnected) before the next kill.
	since := time.Now()
	if err := waitUntil(ctx, func() bool {
		_, a := tr.first(0, true, since)
		_, b := tr.first(1, true, since)
		return a && b
	}); err != nil {
		return k, fmt.Errorf("writes through both zones: %w", err)
	}
	if err := sleep(ctx, cfg.Settle); err != nil {
		return k, err
	}
	surv := 1 - leader
	before, err := scrape(ctx, p.MetricsURL(surv))
	if err != nil {
		return k, err
	}
	k.Victim = string(rune('a' + leader))
	kill := time.Now()
	p.Kill(leader)
	reaped := time.Now()
	restarted := false
	defer func() {
		// A round cut short still brings the node back, so the next
		// round (or the final checks) has a pair.
		if !restarted {
			_ = p.Restart(leader)
		}
	}()
	k.At = kill.Sub(t0)

	var first, promoted time.Time
	if err := waitUntil(ctx, func() bool {
		if promoted.IsZero() {
			if r := role(ctx, p.MetricsURL(surv)); r == rolePrimary || r == roleSolo {
				promoted = time.Now()
			}
		}
		var ok bool
		first, ok = tr.first(surv, true, reaped)
		return ok && !promoted.IsZero()
	}); err != nil {
		return k, fmt.Errorf("no write succeeded on the survivor: %w", err)
	}
	k.Outage, k.Promoted = first.Sub(kill), promoted.Sub(kill)
	if err := waitUntil(ctx, func() bool {
		w, ok := tr.firstWhere(reaped, func(s sample) bool {
			return s.zone == surv && s.write && !s.probe && s.ok && !s.start.Before(reaped)
		})
		k.WriterOutage = w.Sub(kill)
		return ok
	}); err != nil {
		return k, fmt.Errorf("no steady writer's write succeeded on the survivor: %w", err)
	}
	if err := sleep(ctx, time.Second); err != nil {
		return k, err
	}
	k.NewWrites = tr.count(first, func(s sample) bool { return s.zone == surv && s.write && s.ok })
	k.Held = tr.count(kill, func(s sample) bool { return s.zone == surv && s.write && !s.ok && s.start.Before(kill) })
	if cfg.Readers > 0 {
		if r, ok := tr.first(surv, false, reaped); ok {
			k.ReadOutage = r.Sub(kill)
		}
	}
	acked := tr.ackedKeys()
	if k.Lost, err = missingOn(ctx, p.Zones()[surv], cfg.Prefix+"failover/", acked); err != nil {
		return k, fmt.Errorf("reading back from the survivor: %w", err)
	}

	restart := time.Now()
	restarted = true
	if err := p.Restart(leader); err != nil {
		return k, err
	}
	if err := waitUntil(ctx, func() bool {
		return role(ctx, p.MetricsURL(surv)) == rolePrimary && role(ctx, p.MetricsURL(leader)) == roleReplica
	}); err != nil {
		return k, fmt.Errorf("%w again after the restart: %v", errNoPair, err)
	}
	resynced := time.Now()
	k.Resync = resynced.Sub(restart)
	k.Phases[PhaseSteady] = tr.phase(kill.Add(-cfg.Settle), kill)
	k.Phases[PhaseZoneLost] = tr.phase(first, restart)
	k.Phases[PhaseRejoin] = tr.phase(restart, resynced)
	if k.LostAfterRejoin, err = missingOn(ctx, p.Zones()[leader], cfg.Prefix+"failover/", acked); err != nil {
		return k, fmt.Errorf("reading back from the restarted node: %w", err)
	}
	after, err := scrape(ctx, p.MetricsURL(surv))
	if err != nil {
		return k, err
	}
	k.Solo = time.Duration((after[mSolo] - before[mSolo]) * float64(time.Second))
	k.Failovers = int(after[mFailovers] - before[mFailovers])
	k.FalseFailovers = int(after[mFalseFailovers] - before[mFalseFailovers])
	return k, nil
}

// waitPair waits until one node is a synchronous primary and the other its
// replica, and returns the primary's zone.
func waitPair(ctx context.Context, p *target.Pair) (int, error) {
	leader := -1
	err := waitUntil(ctx, func() bool {
		a, b := role(ctx, p.MetricsURL(0)), role(ctx, p.MetricsURL(1))
		switch {
		case a == rolePrimary && b == roleReplica:
			leader = 0
		case b == rolePrimary && a == roleReplica:
			leader = 1
		}
		return leader >= 0
	})
	if err != nil {
		return -1, fmt.Errorf("%w: %v", errNoPair, err)
	}
	return leader, nil
}

// waitUntil polls cond every 10 ms for up to waitTimeout.
func waitUntil(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	for !cond() {
		if err := sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// missingOn counts the keys of want that zone endpoint ep lacks.
func missingOn(ctx context.Context, ep, prefix string, want []string) (int, error) {
	cli, err := newClient([]string{ep})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	lost, err := missing(ctx, cli, prefix, want)
	return len(lost), err
}

// compareHash reads both nodes' HashKV at the primary's current revision
// (retrying while the replica has not applied it yet).
func compareHash(ctx context.Context, eps [2]string) Hash {
	var h Hash
	cli, err := newClient(eps[:])
	if err != nil {
		h.Err = err.Error()
		return h
	}
	defer cli.Close()
	err = waitUntil(ctx, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resp, err := cli.Get(rctx, "dyad-bench-hash-probe")
		if err != nil {
			h.Err = err.Error()
			return false
		}
		h.Revision = resp.Header.Revision
		for z, ep := range eps {
			r, err := cli.HashKV(rctx, ep, h.Revision)
			if err != nil {
				h.Err = fmt.Sprintf("HashKV on %c: %v", 'a'+z, err)
				return false
			}
			h.Hashes[z] = r.Hash
		}
		h.Err = ""
		h.Equal = h.Hashes[0] == h.Hashes[1]
		return h.Equal
	})
	if err != nil && h.Err == "" && !h.Equal {
		h.Err = fmt.Sprintf("hashes differ at revision %d", h.Revision)
	}
	return h
}
