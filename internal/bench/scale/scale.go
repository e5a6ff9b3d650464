package scale

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"

	"github.com/HdrHistogram/hdrhistogram-go"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/bench/target"
)

// Profile is the name `dyad bench --profile` selects this package with.
const Profile = "scale"

// Config sizes the benchmark.
type Config struct {
	Objects    int // objects loaded before anything is measured
	ObjectSize int // bytes per object
	Watchers   int // watches on the object prefix during the watched puts
	Writers    int // concurrent putters in the put phases
	Listers    int // concurrent paginated LISTs in the storm
	// WatchRate is the total put rate (per second) of the paced phase
	// under the watchers; 0 skips the phase.
	WatchRate int
	PageSize  int64
	// Duration of each measured phase.
	Duration time.Duration
	// Prefix starts every key ("/registry/..."); the objects live under
	// Prefix + "scale/".
	Prefix string
	// Progress, when set, is told what runs and the fraction done (0..1).
	Progress func(desc string, frac float64) `json:"-"`
}

// Systems are the targets the profile runs on.
var Systems = []string{"dyad", "dyad-pair", "etcd-1", "etcd-3"}

// Applies reports whether the profile runs on t.
func Applies(t target.Target) bool { return slices.Contains(Systems, t.Name()) }

// Expected is roughly how long Run takes on a target, for the progress bar.
func (c Config) Expected() time.Duration {
	load := time.Duration(c.Objects) * 300 * time.Microsecond // ~3,000 puts/s
	return load + 5*c.Duration + 30*time.Second
}

// Row is one target's figures.
type Row struct {
	Target string `json:"target"`
	// Round is the round of the bench the row was measured in, from 1
	// (Bench.Run: one row per target and round).
	Round   int           `json:"round"`
	Version string        `json:"version"`
	Objects int           `json:"objects"`
	Load    time.Duration `json:"load_ns"`
	// PortOpen and Serve are measured from the restart (see the package
	// comment).
	PortOpen time.Duration `json:"port_open_ns"`
	Serve    time.Duration `json:"serve_ns"`
	Get      Dist          `json:"get"`
	// PutRate is acknowledged puts per second with no watcher and no
	// lister, PutRateWatched with the watchers open.
	PutRate        float64 `json:"put_rate"`
	PutRateWatched float64 `json:"put_rate_watched"`
	// WatchLag is the closed-loop phase's watch lag from each put's
	// acknowledgement (0 if the event came first), WatchLagSend from its
	// send.
	WatchLag     Dist `json:"watch_lag"`
	WatchLagSend Dist `json:"watch_lag_send"`
	// Missed counts events a watcher never delivered before the phase
	// ended.
	Missed int64 `json:"missed"`
	// The paced phase, under the same watchers: puts issued open-loop at
	// Config.WatchRate. PacedPutRate is the puts acknowledged per second
	// (from the first put's due time to the last acknowledgement),
	// PacedPut their latency, PacedLag the lag of their events from each
	// put's send, PacedMissed the events never delivered and PacedHeld
	// the puts the pacer held back because maxInFlight puts awaited
	// their acknowledgement (0 when the target kept up).
	PacedPutRate float64 `json:"paced_put_rate"`
	PacedPut     Dist    `json:"paced_put"`
	PacedLag     Dist    `json:"paced_watch_lag"`
	// PacedLagAck is the same events' lag from each put's
	// acknowledgement (0 if delivered first): the fan-out alone.
	PacedLagAck Dist  `json:"paced_watch_lag_ack"`
	PacedMissed int64 `json:"paced_missed"`
	PacedHeld   int64 `json:"paced_held"`
	// Put is the writers' latency alone, PutStorm during the LIST storm;
	// Pages is the first pages' latency, Lists the full LISTs completed
	// and ListPages the pages read.
	Put       Dist  `json:"put"`
	PutStorm  Dist  `json:"put_storm"`
	Pages     Dist  `json:"first_page"`
	Lists     int64 `json:"lists"`
	ListPages int64 `json:"list_pages"`
	// Retries counts requests retried after a transient error ("no
	// leader", unavailable) over the whole run; TimedOut the puts among
	// them answered "request timed out" (outcome unknown).
	Retries  int64  `json:"retries"`
	TimedOut int64  `json:"timed_out"`
	Err      string `json:"error,omitempty"`
}

// Dist summarises durations (report.Dist).
type Dist = report.Dist

func distOf(ds []time.Duration) Dist { return report.DistOf(ds) }

// Run loads the objects into t and measures it; the restart comes last.
// A phase that fails ends the row with its error.
func Run(ctx context.Context, t target.Target, eps []string, cfg Config) (row Row, err error) {
	row = Row{Target: t.Name(), Version: t.Version(), Objects: cfg.Objects}
	defer func() {
		if err != nil {
			row.Err = err.Error()
		}
	}()
	cli, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return row, err
	}
	defer cli.Close()
	b := &bench{cfg: cfg, cli: cli, eps: eps, value: strings.Repeat("p", cfg.ObjectSize)}
	phases := []struct {
		name string
		run  func(context.Context, *Row, func(float64)) error
	}{
		{"load", b.load},
		{"gets", b.gets},
		{"puts", b.puts},
		{"watched puts", b.watched},
		{"LIST storm", b.storm},
	}
	n := float64(len(phases) + 1)
	for i, p := range phases {
		prog := func(f float64) { cfg.progress(fmt.Sprintf("%s scale: %s", t.Name(), p.name), (float64(i)+f)/n) }
		if err := p.run(ctx, &row, prog); err != nil {
			return row, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	if r, ok := t.(target.Restartable); ok {
		cfg.progress(t.Name()+" scale: restart", (n-1)/n)
		if err := b.restart(ctx, r, &row); err != nil {
			return row, fmt.Errorf("restart: %w", err)
		}
	}
	row.Retries, row.TimedOut = b.retries.Load(), b.timedOut.Load()
	return row, nil
}

func (c Config) progress(desc string, frac float64) {
	if c.Progress != nil {
		c.Progress(desc, min(max(frac, 0), 1))
	}
}

type bench struct {
	cfg      Config
	cli      *clientv3.Client
	eps      []string
	value    string
	retries  atomic.Int64 // transient errors retried
	timedOut atomic.Int64 // of which puts answered "request timed out"
}

// retry runs op until it succeeds, fails with an error a client would
// not retry, or a minute passes: "no leader" and unavailable answers come
// and go on a pair whose machine is overloaded, and an apiserver retries
// them too. It counts the retries.
func (b *bench) retry(ctx context.Context, op func(context.Context) error) error {
	return b.retryOp(ctx, false, op)
}

// retryPut is retry for a put of a fixed value, which is retried after
// "request timed out" as well: the server could not tell whether the put
// took effect, and putting the same value again is what a client does
// (the figures count the retried put once, the row counts the timeout).
// At 500,000 objects on a loaded machine one such answer in the load
// otherwise ended the target's whole row.
func (b *bench) retryPut(ctx context.Context, op func(context.Context) error) error {
	return b.retryOp(ctx, true, op)
}

func (b *bench) retryOp(ctx context.Context, put bool, op func(context.Context) error) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := op(ctx)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		switch {
		case transient(err):
		case put && timedOut(err):
			b.timedOut.Add(1)
		default:
			return err
		}
		b.retries.Add(1)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// timedOut reports etcd's "request timed out" (rpctypes.ErrTimeout, which
// the client hands back with no gRPC status of its own).
func timedOut(err error) bool {
	return errors.Is(err, rpctypes.ErrTimeout) || strings.Contains(err.Error(), rpctypes.ErrTimeout.Error())
}

func transient(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, rpctypes.ErrNoLeader) || errors.Is(err, rpctypes.ErrGRPCNoLeader) ||
		strings.Contains(err.Error(), rpctypes.ErrNoLeader.Error())
}

// namespaces is how many namespaces the objects are spread over.
const namespaces = 100

func (b *bench) key(i int) string {
	return fmt.Sprintf("%sscale/pods/ns-%03d/pod-%07d", b.cfg.Prefix, i%namespaces, i)
}

func (b *bench) prefix() string { return b.cfg.Prefix + "scale/" }

// load puts every object, 64 at a time.
func (b *bench) load(ctx context.Context, row *Row, prog func(float64)) error {
	start := time.Now()
	var done atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	const loaders = 64
	for w := range loaders {
		g.Go(func() error {
			for i := w; i < b.cfg.Objects; i += loaders {
				err := b.retryPut(gctx, func(ctx context.Context) error {
					_, err := b.cli.Put(ctx, b.key(i), b.value)
					return err
				})
				if err != nil {
					return err
				}
				if d := done.Add(1); d%1000 == 0 {
					prog(float64(d) / float64(b.cfg.Objects))
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	row.Load = time.Since(start)
	return nil
}

// gets times linearizable Gets of random objects from one client.
func (b *bench) gets(ctx context.Context, row *Row, prog func(float64)) error {
	rng := rand.New(rand.NewPCG(1, 2))
	var lat []time.Duration
	start := time.Now()
	for time.Since(start) < b.cfg.Duration {
		t0 := time.Now()
		k := b.key(rng.IntN(b.cfg.Objects))
		var r *clientv3.GetResponse
		err := b.retry(ctx, func(ctx context.Context) error {
			var err error
			r, err = b.cli.Get(ctx, k)
			return err
		})
		if err != nil {
			return err
		}
		if len(r.Kvs) != 1 {
			return errors.New("an object loaded is missing")
		}
		lat = append(lat, time.Since(t0))
		if len(lat)%256 == 0 {
			prog(float64(time.Since(start)) / float64(b.cfg.Duration))
		}
	}
	row.Get = distOf(lat)
	return nil
}

// writers runs cfg.Writers putters of random objects until stop and
// returns their latencies. With ws (the closed-loop phase under the
// watchers), each put's value carries its sequence number, whose send
// time ws keeps, and ws learns each acknowledgement.
func (b *bench) writers(ctx context.Context, stop <-chan struct{}, ws *watchSet) ([]time.Duration, error) {
	var mu sync.Mutex
	var all []time.Duration
	g, gctx := errgroup.WithContext(ctx)
	for w := range b.cfg.Writers {
		g.Go(func() error {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			var lat []time.Duration
			defer func() { mu.Lock(); all = append(all, lat...); mu.Unlock() }()
			for {
				select {
				case <-stop:
					return nil
				case <-gctx.Done():
					return gctx.Err()
				default:
				}
				k, v := b.key(rng.IntN(b.cfg.Objects)), b.value
				t0 := time.Now()
				if ws != nil {
					if seq := ws.closedSeq.Add(1) - 1; seq < int64(len(ws.closedSends)) {
						v = seqValue(closedMark, seq, b.value)
						ws.closedSends[seq].Store(t0.UnixNano())
					}
				}
				var r *clientv3.PutResponse
				err := b.retryPut(gctx, func(ctx context.Context) error {
					var err error
					r, err = b.cli.Put(ctx, k, v)
					return err
				})
				if err != nil {
					return err
				}
				now := time.Now()
				lat = append(lat, now.Sub(t0))
				if ws != nil {
					ws.acks.Store(r.Header.Revision, now)
				}
			}
		})
	}
	err := g.Wait()
	return all, err
}

// timed closes the returned channel after d, reporting progress; the
// caller calls the returned wait before returning.
func timed(ctx context.Context, d time.Duration, prog func(float64)) (<-chan struct{}, func()) {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned: the caller waits for done
		defer close(done)
		defer close(stop)
		start := time.Now()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for time.Since(start) < d {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				prog(float64(time.Since(start)) / float64(d))
			}
		}
	}()
	return stop, func() { <-done }
}

// puts measures the writers alone.
func (b *bench) puts(ctx context.Context, row *Row, prog func(float64)) error {
	stop, wait := timed(ctx, b.cfg.Duration, prog)
	defer wait()
	start := time.Now()
	lat, err := b.writers(ctx, stop, nil)
	if err != nil {
		return err
	}
	row.Put = distOf(lat)
	row.PutRate = float64(len(lat)) / time.Since(start).Seconds()
	return nil
}

// watched opens cfg.Watchers watches, each on one of the objects' 100
// namespaces (so every write reaches Watchers/100 of them, as kubelets each
// watch their own pods; a watch on the whole prefix would have the bench's
// one process decode a thousand copies of every object and measure
// itself), over 16 client connections (one watch stream each), and runs
// two phases under them: closed-loop, cfg.Writers writers as fast as the
// target acknowledges (the put rate under the watchers, and the lag at
// that rate); then paced, puts issued open-loop at cfg.WatchRate per
// second (the lag at the same load on every target).
func (b *bench) watched(ctx context.Context, row *Row, prog func(float64)) error {
	ws, err := b.openWatchers(ctx)
	if ws != nil {
		defer ws.close()
	}
	if err != nil {
		return err
	}
	half := func(off float64) func(float64) { return func(f float64) { prog(off + f/2) } }
	if err := b.closedLoop(ctx, ws, row, half(0)); err != nil {
		return err
	}
	if b.cfg.WatchRate > 0 {
		if err := b.paced(ctx, ws, row, half(0.5)); err != nil {
			return err
		}
	}
	ws.close() // the watchers merge their figures as they end
	row.WatchLag, row.WatchLagSend = ws.lag(lagClosed), ws.lag(lagClosedSend)
	row.PacedLag, row.PacedLagAck = ws.lag(lagPaced), ws.lag(lagPacedAck)
	return nil
}

// The phases of the watched puts, as indexes of watchSet.delivered.
const (
	phaseClosed = iota
	phasePaced
	nPhases
)

// The lags the watchers record, as indexes of watchSet.lags: each phase's
// from the put's send (the lag a client sees between its write and the
// watchers' event) and from its acknowledgement (the fan-out alone,
// without the write's own latency).
const (
	lagClosed     = iota // from the acknowledgement
	lagClosedSend        // from the send
	lagPaced
	lagPacedAck
	nLags
)

// watchSet is the watchers of the watched phases and what they measured.
// Each watcher tells the phase of an event by its value (seqOf) and
// records its lags from the put's send (closedSends, sends: stored before
// the put is sent, so always there) and from its acknowledgement (acks,
// pacedAcks; 0 if the event came first).
type watchSet struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup // the watchers
	clis   []*clientv3.Client
	acks   sync.Map // closed-loop: revision → ack time
	// closedSends: closed-loop sequence → send time (Unix ns); closedSeq
	// numbers the closed-loop puts (those beyond closedSends' length go
	// untimed from the send).
	closedSends []atomic.Int64
	closedSeq   atomic.Int64
	sends       []atomic.Int64 // paced: sequence → send time (Unix ns)
	// pacedAcks: sequence → ack time (Unix ns), 0 until acknowledged.
	pacedAcks []atomic.Int64

	delivered [nPhases]atomic.Int64
	mu        sync.Mutex // guards lags
	lags      [nLags]*hdrhistogram.Histogram
}

func newLagHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3) // µs
}

// openWatchers starts the watchers and returns once every one is created.
// The caller closes the set (also after an error, when it is not nil).
func (b *bench) openWatchers(ctx context.Context) (*watchSet, error) {
	const conns = 16
	wctx, cancel := context.WithCancel(ctx)
	ws := &watchSet{cancel: cancel}
	for l := range nLags {
		ws.lags[l] = newLagHist()
	}
	ws.closedSends = make([]atomic.Int64, closedCap(b.cfg))
	if b.cfg.WatchRate > 0 {
		ws.sends = make([]atomic.Int64, pacedCap(b.cfg))
		ws.pacedAcks = make([]atomic.Int64, pacedCap(b.cfg))
	}
	for range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: b.eps, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return ws, err
		}
		ws.clis = append(ws.clis, c)
	}
	head, err := b.cli.Get(ctx, b.prefix()+"none")
	if err != nil {
		return ws, err
	}
	from := head.Header.Revision + 1
	ready := make(chan struct{}, b.cfg.Watchers)
	for i := range b.cfg.Watchers {
		ns := fmt.Sprintf("%spods/ns-%03d/", b.prefix(), i%namespaces)
		wch := ws.clis[i%conns].Watch(clientv3.WithRequireLeader(wctx), ns, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithCreatedNotify())
		ws.wg.Go(func() { ws.watch(wch, ready) })
	}
	for range b.cfg.Watchers {
		select {
		case <-ready:
		case <-ctx.Done():
			return ws, ctx.Err()
		case <-time.After(time.Minute):
			return ws, errors.New("the watchers did not all start within a minute")
		}
	}
	return ws, nil
}

// watch is one watcher's loop: it records the lag of every event it is
// delivered until its channel closes, then merges its figures.
func (ws *watchSet) watch(wch clientv3.WatchChan, ready chan<- struct{}) {
	var mine [nLags]*hdrhistogram.Histogram
	for l := range nLags {
		mine[l] = newLagHist()
	}
	defer func() {
		ws.mu.Lock()
		defer ws.mu.Unlock()
		for l := range nLags {
			ws.lags[l].Merge(mine[l])
		}
	}()
	first := true
	for resp := range wch {
		if first {
			first = false
			ready <- struct{}{}
		}
		now := time.Now()
		since := func(at int64) int64 { return max((now.UnixNano()-at)/1e3, 1) } // µs, 1 if at is later
		for _, ev := range resp.Events {
			mark, seq, timed := seqOf(ev.Kv.Value)
			if timed && mark == pacedMark && seq < int64(len(ws.sends)) {
				_ = mine[lagPaced].RecordValue(since(ws.sends[seq].Load()))
				ack := int64(1)
				if at := ws.pacedAcks[seq].Load(); at != 0 {
					ack = since(at)
				}
				_ = mine[lagPacedAck].RecordValue(ack)
				ws.delivered[phasePaced].Add(1)
				continue
			}
			lag := int64(1)
			if at, ok := ws.acks.Load(ev.Kv.ModRevision); ok {
				lag = since(at.(time.Time).UnixNano())
			}
			_ = mine[lagClosed].RecordValue(lag)
			if timed && mark == closedMark && seq < int64(len(ws.closedSends)) {
				_ = mine[lagClosedSend].RecordValue(since(ws.closedSends[seq].Load()))
			}
			ws.delivered[phaseClosed].Add(1)
		}
	}
}

// close stops the watchers and waits for them (their figures merged). It
// may be called again.
func (ws *watchSet) close() {
	ws.cancel()
	ws.wg.Wait()
	for _, c := range ws.clis {
		c.Close()
	}
	ws.clis = nil
}

// drain waits until the watchers were delivered every event of phase p
// that puts writes owe them (each write reaches the watchers of its
// namespace) or 10 s pass, and returns how many are missing (0 when the
// watchers are not spread evenly and the count is unknown).
func (b *bench) drain(ctx context.Context, ws *watchSet, p int, puts int64) (missed int64, err error) {
	if b.cfg.Watchers%namespaces != 0 {
		return 0, nil
	}
	want := puts * int64(b.cfg.Watchers/namespaces)
	deadline := time.Now().Add(10 * time.Second)
	for ws.delivered[p].Load() < want && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return max(want-ws.delivered[p].Load(), 0), nil
}

// lag is the distribution of the lags l. The watchers merge their figures
// when they end: call it after ws.close.
func (ws *watchSet) lag(l int) Dist {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	h := ws.lags[l]
	us := func(q float64) time.Duration { return time.Duration(h.ValueAtQuantile(q)) * time.Microsecond }
	return Dist{N: int(h.TotalCount()), P50: us(50), P99: us(99), Max: time.Duration(h.Max()) * time.Microsecond}
}

// closedLoop runs the writers under the watchers for cfg.Duration: the
// put rate under the watchers and the lag from each acknowledgement.
func (b *bench) closedLoop(ctx context.Context, ws *watchSet, row *Row, prog func(float64)) error {
	stop, wait := timed(ctx, b.cfg.Duration, prog)
	start := time.Now()
	lat, err := b.writers(ctx, stop, ws)
	wait()
	if err != nil {
		return err
	}
	row.PutRateWatched = float64(len(lat)) / time.Since(start).Seconds()
	if row.Missed, err = b.drain(ctx, ws, phaseClosed, int64(len(lat))); err != nil {
		return err
	}
	return nil
}

// storm measures the writers while cfg.Listers LIST the whole prefix in
// pages, over and over.
func (b *bench) storm(ctx context.Context, row *Row, prog func(float64)) error {
	stop, wait := timed(ctx, b.cfg.Duration, prog)
	defer wait()
	var mu sync.Mutex
	var firsts []time.Duration
	var lists, pages atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	for range b.cfg.Listers {
		g.Go(func() error {
			for {
				select {
				case <-stop:
					return nil
				default:
				}
				done, err := b.list(gctx, stop, &pages, func(first time.Duration) {
					mu.Lock()
					firsts = append(firsts, first)
					mu.Unlock()
				})
				if err != nil {
					return err
				}
				if done {
					lists.Add(1)
				}
			}
		})
	}
	var lat []time.Duration
	g.Go(func() error {
		var err error
		lat, err = b.writers(gctx, stop, nil)
		return err
	})
	if err := g.Wait(); err != nil {
		return err
	}
	row.PutStorm = distOf(lat)
	row.Pages = distOf(firsts)
	row.Lists = lists.Load()
	row.ListPages = pages.Load()
	return nil
}

// list reads the whole prefix in pages, telling first the first page's
// latency; done is false if stop came before the LIST finished.
func (b *bench) list(ctx context.Context, stop <-chan struct{}, pages *atomic.Int64, first func(time.Duration)) (done bool, err error) {
	key, end := b.prefix(), clientv3.GetPrefixRangeEnd(b.prefix())
	var rev int64
	for {
		select {
		case <-stop:
			return false, nil
		default:
		}
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(b.cfg.PageSize)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		t0 := time.Now()
		var r *clientv3.GetResponse
		err := b.retry(ctx, func(ctx context.Context) error {
			var err error
			r, err = b.cli.Get(ctx, key, opts...)
			return err
		})
		if err != nil {
			return false, err
		}
		pages.Add(1)
		if rev == 0 {
			rev = r.Header.Revision
			first(time.Since(t0))
		}
		if !r.More || len(r.Kvs) == 0 {
			return true, nil
		}
		key = string(r.Kvs[len(r.Kvs)-1].Key) + "\x00"
	}
}

// restart restarts every process of t and times the first successful
// client connection, and the first moment a linearizable read and a write
// have both succeeded.
func (b *bench) restart(ctx context.Context, t target.Restartable, row *Row) error {
	started, err := t.RestartAll()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var g errgroup.Group
	g.Go(func() error {
		for {
			for _, ep := range b.eps {
				if c, err := net.DialTimeout("tcp", ep, 100*time.Millisecond); err == nil {
					c.Close()
					row.PortOpen = time.Since(started)
					return nil
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("no client port opened: %w", ctx.Err())
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	g.Go(func() error {
		// gRPC's reconnect backoff starts at a second: a client that
		// dialled while the port was closed would measure the backoff.
		cli, err := clientv3.New(clientv3.Config{Endpoints: b.eps, DialTimeout: time.Second, Logger: zap.NewNop(),
			DialOptions: []grpc.DialOption{grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.2, MaxDelay: 20 * time.Millisecond},
				MinConnectTimeout: 100 * time.Millisecond,
			})}})
		if err != nil {
			return err
		}
		defer cli.Close()
		readOK, writeOK := false, false
		for !readOK || !writeOK {
			actx, acancel := context.WithTimeout(ctx, 500*time.Millisecond)
			if !readOK {
				_, err := cli.Get(actx, b.key(0))
				readOK = err == nil
			}
			if !writeOK {
				_, err := cli.Put(actx, b.prefix()+"restart-probe", "x")
				writeOK = err == nil
			}
			acancel()
			if readOK && writeOK {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("not serving reads and writes: %w", ctx.Err())
			case <-time.After(5 * time.Millisecond):
			}
		}
		row.Serve = time.Since(started)
		return nil
	})
	return g.Wait()
}
