package twozone

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/bench/target"
)

// ReplicationResult is the replication latency (M1), the replica lag (M3)
// and reads on each zone, all under one write load on both zones.
type ReplicationResult struct {
	Duration time.Duration `json:"duration_ns"`
	// Primary is the zone that was primary ("a" or "b").
	Primary string `json:"primary"`
	Writes  int    `json:"writes"`
	// Latency[0] is writes acknowledged through the primary's zone and
	// delivered by a watch on the replica's; Latency[1] the other way
	// (written through the replica, which forwards to the primary).
	// All is both.
	Latency [2]Dist `json:"latency"`
	All     Dist    `json:"all"`
	// Early counts deliveries that reached the other zone's watcher before
	// the writer had its acknowledgement (synchronous replication makes the
	// replica apply before the primary acks); they count as 0.
	Early int `json:"early"`
	// Undelivered is acknowledged writes no watch delivered within a
	// second of the end.
	Undelivered int `json:"undelivered"`
	// LagRevisions samples the primary's dyad_replication_lag_revisions
	// every 100 ms.
	LagRevisions struct {
		N             int
		P50, P99, Max float64
	} `json:"lag_revisions"`
	// Reads[z] are linearizable reads on zone z's node; Writes the puts.
	Reads  [2]Latency `json:"reads"`
	Puts   [2]Latency `json:"puts"`
	Hash   Hash       `json:"hash"`
	series []lagPoint
}

// Latency is one request kind's distribution on one node.
type Latency struct {
	Role                     string
	N                        int64
	P50, P90, P99, P999, Max time.Duration
}

func latencyOf(role string, h *hdrhistogram.Histogram) Latency {
	us := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond }
	return Latency{Role: role, N: h.TotalCount(), P50: us(50), P90: us(90), P99: us(99), P999: us(99.9),
		Max: time.Duration(h.Max()) * time.Microsecond}
}

type lagPoint struct {
	at  time.Duration // since the start
	lag time.Duration
}

// matcher pairs each write's acknowledgement with its delivery on the
// other zone's watch, whichever comes first.
type matcher struct {
	t0     time.Time
	prefix string
	mu     sync.Mutex
	acks   map[string]time.Time // acknowledged, not yet delivered
	seen   map[string]time.Time // delivered, not yet acknowledged
	lat    [2][]time.Duration   // by direction (0: written through the primary)
	points []lagPoint
	early  int
	leader int
}

func (m *matcher) ack(z int, key string, _ int64, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if d, ok := m.seen[key]; ok {
		delete(m.seen, key)
		m.early++
		_ = d
		m.add(z, at, 0)
		return
	}
	m.acks[key] = at
}

// delivered is a watch event on zone z for key; only writes through the
// other zone count.
func (m *matcher) delivered(z int, key string, at time.Time) {
	if len(key) <= len(m.prefix) || int(key[len(m.prefix)]-'a') == z {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if a, ok := m.acks[key]; ok {
		delete(m.acks, key)
		m.add(1-z, a, at.Sub(a))
		return
	}
	m.seen[key] = at
}

// add records a latency of a write through zone wz acknowledged at ack.
func (m *matcher) add(wz int, ack time.Time, lat time.Duration) {
	dir := 0
	if wz != m.leader {
		dir = 1
	}
	m.lat[dir] = append(m.lat[dir], lat)
	m.points = append(m.points, lagPoint{at: ack.Sub(m.t0), lag: lat})
}

// Replication runs writers, readers and a watch on both zones for
// cfg.Duration and measures how long each write takes to reach the other
// zone's watcher.
func Replication(ctx context.Context, p *target.Pair, cfg Config) (*ReplicationResult, error) {
	leader, err := waitPair(ctx, p)
	if err != nil {
		return nil, err
	}
	eps := p.Zones()
	prefix := cfg.Prefix + "replication/"
	m := &matcher{t0: time.Now(), prefix: prefix, acks: map[string]time.Time{}, seen: map[string]time.Time{}, leader: leader}
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var wg sync.WaitGroup
	defer wg.Wait()
	for z, ep := range eps {
		cli, err := newClient([]string{ep})
		if err != nil {
			return nil, err
		}
		defer cli.Close()
		// The watch is created before any write, so it sees them all.
		wch := cli.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix())
		wg.Add(1)
		go func() {
			defer wg.Done()
			for resp := range wch {
				now := time.Now()
				for _, ev := range resp.Events {
					m.delivered(z, string(ev.Kv.Key), now)
				}
			}
		}()
	}
	// Lag in revisions, as the primary sees it.
	var revs []float64
	var revMu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if mm, err := scrape(wctx, p.MetricsURL(leader)); err == nil {
					revMu.Lock()
					revs = append(revs, mm[mLagRevisions])
					revMu.Unlock()
				}
			}
		}
	}()
	if err := sleep(ctx, 200*time.Millisecond); err != nil { // let both watches register
		return nil, err
	}
	tr, err := startTraffic(ctx, trafficSpec{Endpoints: [][]string{{eps[0]}, {eps[1]}},
		Writers: cfg.Writers, Readers: cfg.Readers, Prefix: prefix, ValueSize: cfg.ValueSize, OnAck: m.ack})
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for time.Since(start) < cfg.Duration && ctx.Err() == nil {
		cfg.progress("dyad-pair: replication latency and lag", float64(time.Since(start))/float64(cfg.Duration))
		_ = sleep(ctx, 200*time.Millisecond)
	}
	tr.stop()
	res := &ReplicationResult{Duration: time.Since(start), Primary: string(rune('a' + leader)), Writes: len(tr.ackedKeys())}
	// Deliveries still in flight get a second.
	_ = waitUntilFor(ctx, time.Second, func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return len(m.acks) == 0
	})
	stopWatch()
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.mu.Lock()
	res.Latency = [2]Dist{distOf(m.lat[0]), distOf(m.lat[1])}
	res.All = distOf(slices.Concat(m.lat[0], m.lat[1]))
	res.Early, res.Undelivered = m.early, len(m.acks)
	res.series = m.points
	m.mu.Unlock()
	slices.Sort(revs)
	if n := len(revs); n > 0 {
		res.LagRevisions.N = n
		res.LagRevisions.P50, res.LagRevisions.P99, res.LagRevisions.Max = revs[(n-1)/2], revs[(n*99-1)/100], revs[n-1]
	}
	roles := [2]string{}
	roles[leader], roles[1-leader] = "primary", "replica"
	for z := range 2 {
		res.Reads[z] = latencyOf(roles[z], tr.reads[z])
		res.Puts[z] = latencyOf(roles[z], tr.writes[z])
	}
	res.Hash = compareHash(ctx, eps)
	if res.Hash.Err != "" {
		return res, fmt.Errorf("HashKV: %s", res.Hash.Err)
	}
	return res, nil
}

// waitUntilFor is waitUntil with its own bound; it returns the context's
// error when the bound passes first.
func waitUntilFor(ctx context.Context, d time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return waitUntil(ctx, cond)
}
