package workload

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
)

// Histogram bounds, in microseconds: 1 µs to 60 s at 3 significant digits
// (0.1% resolution), HdrHistogram's usual latency setting.
const (
	histMinUS = 1
	histMaxUS = 60_000_000
	histSig   = 3
)

// Spec is one measured run.
type Spec struct {
	Op      Op
	Clients int
	// Duration of the measured part. Ignored when Ops > 0.
	Duration time.Duration
	// Ops, when > 0, is the number of measured requests, over all clients.
	Ops int64
	// Warmup runs the workload unmeasured for this long first.
	Warmup time.Duration
	// Seed makes the requests reproducible (see the package comment).
	Seed uint64
	// ValueSize is the length of every value written (bytes).
	ValueSize int
	// Prefix starts every key the bench writes ("bench/").
	Prefix string
	// Conns is the number of gRPC connections the clients share
	// (round-robin). 0: min(Clients, 16).
	Conns int
	// Timeout bounds one request.
	Timeout time.Duration
	// Progress, when set, is called with the fraction done (0..1) about
	// ten times a second, from one goroutine.
	Progress func(float64)
}

// Result is what one run measured.
type Result struct {
	Op      Op  `json:"op"`
	Clients int `json:"clients"`
	// Unsupported is non-empty when the target does not implement Op; then
	// nothing else is set.
	Unsupported string `json:"unsupported,omitempty"`
	// Ops is the number of completed measured requests (txn conflicts
	// included), Errors the number that failed.
	Ops        int64   `json:"ops"`
	Errors     int64   `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Conflicts  int64   `json:"conflicts,omitempty"`
	Elapsed    float64 `json:"elapsed_s"`
	Throughput float64 `json:"ops_per_s"`
	// Latencies in microseconds.
	MeanUS float64 `json:"mean_us"`
	P50US  float64 `json:"p50_us"`
	P90US  float64 `json:"p90_us"`
	P99US  float64 `json:"p99_us"`
	P999US float64 `json:"p999_us"`
	MaxUS  float64 `json:"max_us"`
	// Hist is the merged latency histogram (µs), for CDF plots.
	Hist *hdrhistogram.Snapshot `json:"hist,omitempty"`
	// RoundsOpsPerS is each round's throughput when the result pools
	// several rounds of the cell (Pool); empty for a single run.
	RoundsOpsPerS []float64 `json:"rounds_ops_per_s,omitempty"`
}

// Pool combines several runs of one cell (the rounds of `dyad bench
// --rounds`) into one result, as if they were one run: the latencies of
// every request of every round, and the throughput of all requests over
// all measured time. Each round's throughput stays in RoundsOpsPerS. A
// round that found the operation unsupported makes the pool so. rs must
// all be of one operation and client count; one result is returned as
// it is.
func Pool(rs []Result) Result {
	if len(rs) == 1 {
		return rs[0]
	}
	out := Result{Op: rs[0].Op, Clients: rs[0].Clients}
	merged := hdrhistogram.New(histMinUS, histMaxUS, histSig)
	for _, r := range rs {
		if r.Unsupported != "" {
			return Result{Op: r.Op, Clients: r.Clients, Unsupported: r.Unsupported}
		}
		out.Ops += r.Ops
		out.Errors += r.Errors
		out.Conflicts += r.Conflicts
		out.Elapsed += r.Elapsed
		if out.FirstError == "" {
			out.FirstError = r.FirstError
		}
		out.RoundsOpsPerS = append(out.RoundsOpsPerS, r.Throughput)
		if h := r.Histogram(); h != nil {
			merged.Merge(h)
		}
	}
	if out.Elapsed > 0 {
		out.Throughput = float64(out.Ops) / out.Elapsed
	}
	if merged.TotalCount() > 0 {
		out.setLatencies(merged)
	}
	return out
}

// setLatencies sets r's latency figures and histogram from h.
func (r *Result) setLatencies(h *hdrhistogram.Histogram) {
	r.MeanUS = h.Mean()
	r.P50US = float64(h.ValueAtQuantile(50))
	r.P90US = float64(h.ValueAtQuantile(90))
	r.P99US = float64(h.ValueAtQuantile(99))
	r.P999US = float64(h.ValueAtQuantile(99.9))
	r.MaxUS = float64(h.Max())
	r.Hist = h.Export()
}

// Histogram rebuilds the latency histogram of a result (nil if none).
func (r *Result) Histogram() *hdrhistogram.Histogram {
	if r.Hist == nil {
		return nil
	}
	return hdrhistogram.Import(r.Hist)
}

func (s *Spec) defaults() {
	if s.Clients <= 0 {
		s.Clients = 1
	}
	if s.Conns <= 0 {
		s.Conns = min(s.Clients, 16)
	}
	if s.ValueSize <= 0 {
		s.ValueSize = 256
	}
	if s.Timeout <= 0 {
		s.Timeout = 10 * time.Second
	}
	if s.Duration <= 0 && s.Ops <= 0 {
		s.Duration = 5 * time.Second
	}
}

// clientSeed derives client i's generator state from the run's seed, so
// every (op, clients, i) has its own reproducible stream.
func clientSeed(seed uint64, op Op, clients, i int) (uint64, uint64) {
	h := fnv.New64a()
	fmt.Fprintf(h, "%s/%d/%d", op, clients, i)
	return seed, h.Sum64()
}

// Run measures spec against endpoints.
func Run(ctx context.Context, endpoints []string, spec Spec) (Result, error) {
	spec.defaults()
	res := Result{Op: spec.Op, Clients: spec.Clients}
	conns := make([]*clientv3.Client, spec.Conns)
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	}()
	for i := range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return res, err
		}
		conns[i] = c
	}
	if err := prefill(ctx, conns[0], spec); err != nil {
		if IsUnsupported(err) {
			res.Unsupported = err.Error()
			return res, nil
		}
		return res, fmt.Errorf("prefill: %w", err)
	}

	clients := make([]*client, spec.Clients)
	for i := range clients {
		s1, s2 := clientSeed(spec.Seed, spec.Op, spec.Clients, i)
		clients[i] = &client{id: i, cli: conns[i%len(conns)], rng: rand.New(rand.NewPCG(s1, s2)),
			prefix: spec.Prefix, value: make([]byte, spec.ValueSize), shape: spec.Op}
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	// Setup, then one probe request on client 0: an unsupported kind stops
	// here, before anything is measured.
	for _, c := range clients {
		if err := c.setup(ctx); err != nil {
			if IsUnsupported(err) {
				res.Unsupported = err.Error()
				return res, nil
			}
			return res, fmt.Errorf("client setup: %w", err)
		}
	}
	if err := probeOnce(ctx, clients[0], spec.Timeout); err != nil {
		if IsUnsupported(err) {
			res.Unsupported = err.Error()
			return res, nil
		}
		return res, fmt.Errorf("probe %s: %w", spec.Op, err)
	}
	clients[0].confl = 0
	return measure(ctx, clients, spec, res)
}

func probeOnce(ctx context.Context, c *client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	arg, err := c.pre(ctx)
	if err != nil {
		return err
	}
	return c.do(ctx, arg)
}

// prefill writes the keys range reads read (by RangeL's name, so both range
// kinds read the same keys). Idempotent per target: it rewrites them.
func prefill(ctx context.Context, cli *clientv3.Client, spec Spec) error {
	if isK8s(spec.Op) {
		return k8sPrefill(ctx, cli, spec)
	}
	if spec.Op != RangeL && spec.Op != RangeS {
		return nil
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0))
	val := make([]byte, spec.ValueSize)
	for i := range val {
		val[i] = letters[rng.IntN(len(letters))]
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range rangeKeys {
		g.Go(func() error {
			_, err := cli.Put(gctx, key(spec.Prefix, RangeL, i), string(val))
			return err
		})
	}
	return g.Wait()
}

// measure runs the clients: warmup, then the measured part.
func measure(ctx context.Context, clients []*client, spec Spec, res Result) (Result, error) {
	start := time.Now()
	measureFrom := start.Add(spec.Warmup)
	deadline := time.Time{}
	if spec.Ops <= 0 {
		deadline = measureFrom.Add(spec.Duration)
	}
	var (
		budget   atomic.Int64 // measured requests left (op-count mode)
		done     atomic.Int64 // measured requests finished
		errCount atomic.Int64
		firstErr error
		errOnce  sync.Once
		hists    = make([]*hdrhistogram.Histogram, len(clients))
		lastEnd  = make([]time.Time, len(clients))
	)
	budget.Store(spec.Ops)
	runCtx, stop := context.WithCancel(ctx)
	defer stop()

	var wg sync.WaitGroup
	for i, c := range clients {
		hists[i] = hdrhistogram.New(histMinUS, histMaxUS, histSig)
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := hists[i]
			for runCtx.Err() == nil {
				now := time.Now()
				measured := !now.Before(measureFrom)
				if measured && spec.Ops > 0 && budget.Add(-1) < 0 {
					return
				}
				if !deadline.IsZero() && !now.Before(deadline) {
					return
				}
				rctx, cancel := context.WithTimeout(runCtx, spec.Timeout)
				arg, err := c.pre(rctx)
				t0 := time.Now()
				if err == nil {
					err = c.do(rctx, arg)
				}
				t1 := time.Now()
				cancel()
				if !measured {
					continue
				}
				lastEnd[i] = t1
				if err != nil {
					if runCtx.Err() != nil {
						return
					}
					errCount.Add(1)
					errOnce.Do(func() { firstErr = err })
					continue
				}
				_ = h.RecordValue(min(max(t1.Sub(t0).Microseconds(), histMinUS), histMaxUS))
				done.Add(1)
			}
		}()
	}
	finished := make(chan struct{})
	var tick sync.WaitGroup
	if spec.Progress != nil {
		tick.Add(1)
		go func() {
			defer tick.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-finished:
					spec.Progress(1)
					return
				case now := <-t.C:
					spec.Progress(fraction(now, start, deadline, done.Load(), spec.Ops))
				}
			}
		}()
	}
	wg.Wait()
	close(finished)
	tick.Wait()
	if err := ctx.Err(); err != nil {
		return res, err
	}

	end := measureFrom
	for _, t := range lastEnd {
		if t.After(end) {
			end = t
		}
	}
	merged := hdrhistogram.New(histMinUS, histMaxUS, histSig)
	for _, h := range hists {
		merged.Merge(h)
	}
	for _, c := range clients {
		res.Conflicts += c.confl
	}
	res.Ops, res.Errors = done.Load(), errCount.Load()
	if firstErr != nil {
		res.FirstError = firstErr.Error()
	}
	res.Elapsed = end.Sub(measureFrom).Seconds()
	if res.Elapsed > 0 {
		res.Throughput = float64(res.Ops) / res.Elapsed
	}
	if res.Ops == 0 {
		if res.Errors > 0 {
			// Every request failed (e.g. timed out under this many
			// clients): that is the cell's figure, recorded with its
			// errors, and the target's other cells still run.
			return res, nil
		}
		return res, fmt.Errorf("%s: no request completed", spec.Op)
	}
	res.setLatencies(merged)
	return res, nil
}

// fraction estimates progress: by time in duration mode, by count in
// op-count mode (after the warmup).
func fraction(now, start, deadline time.Time, done, ops int64) float64 {
	if deadline.IsZero() {
		if ops <= 0 {
			return 0
		}
		return min(float64(done)/float64(ops), 1)
	}
	total := deadline.Sub(start)
	return min(float64(now.Sub(start))/float64(total), 1)
}
