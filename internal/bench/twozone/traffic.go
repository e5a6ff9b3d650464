package twozone

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// sample is one request of the client timeline.
type sample struct {
	zone       int
	write      bool
	probe      bool // a write of the prober, not of a steady writer
	ok         bool
	start, end time.Time
}

// trafficSpec is the load a benchmark runs while it injects faults.
type trafficSpec struct {
	// Endpoints[z] are the endpoints zone z's clients use (a client per
	// zone, so a zone's traffic goes to that zone's node).
	Endpoints [][]string
	// Writers and Readers per zone. A writer puts fresh keys (each written
	// once, so an acknowledged key must exist afterwards); a reader sends
	// linearizable Gets.
	Writers, Readers int
	// Prefix starts every key; unique per run.
	Prefix    string
	ValueSize int
	// Timeout bounds one request.
	Timeout time.Duration
	// Probe, when > 0, starts a fresh write through each zone this often,
	// without waiting for earlier ones (at most maxProbes in flight), so
	// the first write a node accepts after a fault is seen within Probe
	// even while every steady writer waits on a request sent before it.
	Probe time.Duration
	// OnAck, when set, is called after each acknowledged write, from the
	// writer's goroutine.
	OnAck func(zone int, key string, rev int64, at time.Time)
}

// traffic runs a trafficSpec and records every request.
type traffic struct {
	spec    trafficSpec
	clients []*clientv3.Client
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	samples []sample   // in order of completion
	acked   []string
	ackedAt map[string]time.Time      // when each acked key's write returned
	reads   []*hdrhistogram.Histogram // per zone, µs
	writes  []*hdrhistogram.Histogram
}

// dialOptions make a client retry a node that was down within half a
// second, rather than after gRPC's default backoff of up to two minutes:
// the next round kills the node on the other side.
var dialOptions = []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 500 * time.Millisecond},
	MinConnectTimeout: time.Second,
})}

func newClient(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 2 * time.Second,
		DialOptions: dialOptions, Logger: zap.NewNop()})
}

func startTraffic(ctx context.Context, spec trafficSpec) (*traffic, error) {
	if spec.Timeout <= 0 {
		spec.Timeout = 3 * time.Second
	}
	t := &traffic{spec: spec}
	for range spec.Endpoints {
		c, err := newClient(spec.Endpoints[len(t.clients)])
		if err != nil {
			t.closeClients()
			return nil, err
		}
		t.clients = append(t.clients, c)
		t.reads = append(t.reads, newHist())
		t.writes = append(t.writes, newHist())
	}
	ctx, t.cancel = context.WithCancel(ctx)
	value := strings.Repeat("v", max(spec.ValueSize, 1))
	for z := range spec.Endpoints {
		for w := range spec.Writers {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.writer(ctx, z, w, value)
			}()
		}
		if spec.Probe > 0 {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.prober(ctx, z, value)
			}()
		}
		for range spec.Readers {
			t.wg.Add(1)
			go func() {
				defer t.wg.Done()
				t.reader(ctx, z)
			}()
		}
	}
	return t, nil
}

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(1, 60_000_000, 3) }

// stop ends the traffic and waits for every client goroutine.
func (t *traffic) stop() {
	t.cancel()
	t.wg.Wait()
	t.closeClients()
}

func (t *traffic) closeClients() {
	for _, c := range t.clients {
		c.Close()
	}
	t.clients = nil
}

func (t *traffic) writer(ctx context.Context, z, w int, value string) {
	for seq := 0; ctx.Err() == nil; seq++ {
		key := fmt.Sprintf("%s%c/%02d/%09d", t.spec.Prefix, 'a'+z, w, seq)
		if !t.put(ctx, z, key, value, false) {
			pause(ctx)
		}
	}
}

// maxProbes bounds the prober's writes in flight per zone.
const maxProbes = 32

func (t *traffic) prober(ctx context.Context, z int, value string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, maxProbes)
	tick := time.NewTicker(t.spec.Probe)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case slots <- struct{}{}:
		default:
			continue // maxProbes already waiting
		}
		key := fmt.Sprintf("%s%c/probe/%09d", t.spec.Prefix, 'a'+z, seq)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-slots }()
			t.put(ctx, z, key, value, true)
		}()
	}
}

// put writes key through zone z and records it; false if it failed.
func (t *traffic) put(ctx context.Context, z int, key, value string, probe bool) bool {
	rctx, cancel := context.WithTimeout(ctx, t.spec.Timeout)
	t0 := time.Now()
	resp, err := t.clients[z].Put(rctx, key, value)
	t1 := time.Now()
	cancel()
	if ctx.Err() != nil {
		return false // cut short by stop: not a sample
	}
	t.record(sample{zone: z, write: true, probe: probe, ok: err == nil, start: t0, end: t1}, key)
	if err == nil && t.spec.OnAck != nil {
		t.spec.OnAck(z, key, resp.Header.Revision, t1)
	}
	return err == nil
}

func (t *traffic) reader(ctx context.Context, z int) {
	key := t.spec.Prefix + "read-probe"
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, t.spec.Timeout)
		t0 := time.Now()
		_, err := t.clients[z].Get(rctx, key)
		t1 := time.Now()
		cancel()
		if ctx.Err() != nil {
			return
		}
		t.record(sample{zone: z, ok: err == nil, start: t0, end: t1}, "")
		if err != nil {
			pause(ctx)
		}
	}
}

// pause spaces out retries against a node that refuses at once, so a
// down zone does not spin a core.
func pause(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Millisecond):
	}
}

func (t *traffic) record(s sample, key string) {
	us := max(s.end.Sub(s.start).Microseconds(), 1)
	t.mu.Lock()
	defer t.mu.Unlock()
	t.samples = append(t.samples, s)
	if !s.ok {
		return
	}
	if s.write {
		t.acked = append(t.acked, key)
		if t.ackedAt == nil {
			t.ackedAt = map[string]time.Time{}
		}
		t.ackedAt[key] = s.end
		_ = t.writes[s.zone].RecordValue(us)
	} else {
		_ = t.reads[s.zone].RecordValue(us)
	}
}

// first is the end of the first successful write (or read) through zone z
// that started at or after from; ok is false if there is none yet.
func (t *traffic) first(z int, write bool, from time.Time) (time.Time, bool) {
	return t.firstWhere(from, func(s sample) bool {
		return s.zone == z && s.write == write && s.ok && !s.start.Before(from)
	})
}

// firstWhere is the earliest end, at or after from, of a sample matching
// keep.
func (t *traffic) firstWhere(from time.Time, keep func(sample) bool) (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var first time.Time
	// Samples are in completion order, so scanning back can stop at the
	// first one that ended before from.
	for i := len(t.samples) - 1; i >= 0; i-- {
		s := t.samples[i]
		if s.end.Before(from) {
			break
		}
		if keep(s) {
			first = s.end
		}
	}
	return first, !first.IsZero()
}

// count is the number of samples matching keep that ended at or after from.
func (t *traffic) count(from time.Time, keep func(sample) bool) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for i := len(t.samples) - 1; i >= 0 && !t.samples[i].end.Before(from); i-- {
		if keep(t.samples[i]) {
			n++
		}
	}
	return n
}

// phase counts the steady clients' successful requests (not the probes')
// that ended in [from, to).
func (t *traffic) phase(from, to time.Time) PhaseCount {
	c := PhaseCount{Seconds: to.Sub(from).Seconds()}
	if c.Seconds <= 0 {
		return PhaseCount{}
	}
	steady := func(write bool) func(sample) bool {
		return func(s sample) bool { return s.ok && !s.probe && s.write == write && s.end.Before(to) }
	}
	c.Writes, c.Reads = t.count(from, steady(true)), t.count(from, steady(false))
	return c
}

// ackedKeys is a copy of every key acknowledged so far.
func (t *traffic) ackedKeys() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.acked...)
}

// ackTime is when key's write was acknowledged (zero if it was not).
func (t *traffic) ackTime(key string) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ackedAt[key]
}

// timeline is a copy of every sample.
func (t *traffic) timeline() []sample {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]sample(nil), t.samples...)
}

// missing returns the keys of want that a linearizable read of prefix
// through cli does not find. It pages through the range so a long run's
// keys need not fit one response.
func missing(ctx context.Context, cli *clientv3.Client, prefix string, want []string) ([]string, error) {
	have := make(map[string]struct{}, len(want))
	from, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		resp, err := cli.Get(rctx, from, clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(10000))
		cancel()
		if err != nil {
			return nil, err
		}
		for _, kv := range resp.Kvs {
			have[string(kv.Key)] = struct{}{}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	var lost []string
	for _, k := range want {
		if _, ok := have[k]; !ok {
			lost = append(lost, k)
		}
	}
	return lost, nil
}
