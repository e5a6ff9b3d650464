package scale

import (
	"context"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
)

// clock is the time the pacer reads and waits on; the bench uses the wall
// clock, the tests a fake one.
type clock interface {
	Now() time.Time
	// SleepUntil returns at t or when ctx is done, whichever is first.
	SleepUntil(ctx context.Context, t time.Time)
}

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

func (wallClock) SleepUntil(ctx context.Context, t time.Time) {
	d := time.Until(t)
	if d <= 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
	case <-tm.C:
	}
}

// schedule is an open-loop arrival schedule: put i is due at start +
// i/rate, whatever happened to the puts before it.
type schedule struct {
	start time.Time
	rate  float64 // puts per second, > 0
	end   time.Time
}

// due is when put i is due.
func (s schedule) due(i int64) time.Time {
	return s.start.Add(time.Duration(float64(i) * float64(time.Second) / s.rate))
}

// pace issues put 0, 1, 2, ... each at its due time, until the next one
// would be due at or after s.end or ctx is done, and returns how many it
// issued. issue must not block for long: it starts the put and returns
// (the bench hands the put to a goroutine of its own). A pacer that wakes
// late issues every put already due at once, so the rate holds on
// average and no put is skipped or pushed back by the ones before it
// (that is what makes it open-loop: a slow server does not slow the
// arrivals, as it slows closed-loop writers).
func pace(ctx context.Context, c clock, s schedule, issue func(i int64)) int64 {
	var i int64
	for ctx.Err() == nil {
		at := s.due(i)
		if !at.Before(s.end) {
			break
		}
		if c.Now().Before(at) {
			c.SleepUntil(ctx, at)
			if ctx.Err() != nil {
				break
			}
		}
		issue(i)
		i++
	}
	return i
}

// The marks that start the value of a put the watchers time: after it
// comes the put's sequence number within its phase, so that a watcher
// finds the put's send time whenever its event arrives (before the
// acknowledgement too). Other values are all 'p', so they never start with
// either.
const (
	pacedMark  = '#' // a put of the paced phase
	closedMark = '@' // a put of the closed-loop phase under the watchers
)

// seqDigits is the width of the sequence number after the mark.
const seqDigits = 15

// seqValue is the value of put seq of the phase marked mark: the mark, the
// sequence number in seqDigits decimal digits, then the fill of fill (the
// object's usual value) up to len(fill), so a timed object is as large as
// any other.
func seqValue(mark byte, seq int64, fill string) string {
	b := make([]byte, 0, max(len(fill), 1+seqDigits))
	b = append(b, mark)
	s := strconv.FormatInt(seq, 10)
	for range seqDigits - len(s) {
		b = append(b, '0')
	}
	b = append(b, s...)
	if len(b) < len(fill) {
		b = append(b, fill[len(b):]...)
	}
	return string(b)
}

// seqOf reads the mark and sequence number of a timed put's value; ok is
// false for any other value.
func seqOf(v []byte) (mark byte, seq int64, ok bool) {
	if len(v) < 1+seqDigits || (v[0] != pacedMark && v[0] != closedMark) {
		return 0, 0, false
	}
	n, err := strconv.ParseInt(string(v[1:1+seqDigits]), 10, 64)
	if err != nil || n < 0 {
		return 0, 0, false
	}
	return v[0], n, true
}

// maxInFlight bounds the paced puts awaiting their acknowledgement. A
// target that stalls would otherwise gather a goroutine per due put; at
// the bound the pacer waits (and counts the put as held back), then
// catches up with every put that fell due meanwhile.
const maxInFlight = 1024

// pacedCap is how many puts the paced phase can issue: those due before
// the phase's end, plus one for the rounding.
func pacedCap(c Config) int {
	return int(float64(c.WatchRate)*c.Duration.Seconds()) + 2
}

// closedCap is how many closed-loop puts under the watchers are timed
// from their send: more than any target acknowledges in cfg.Duration
// (100,000 puts/s), 8 bytes each.
func closedCap(c Config) int {
	return int(100_000*c.Duration.Seconds()) + c.Writers
}

// paced issues puts of random objects open-loop at cfg.WatchRate per
// second for cfg.Duration under the watchers of ws, each from a goroutine
// of its own, and records their latency, the rate acknowledged and the
// watch lag of their events measured from each put's send.
func (b *bench) paced(ctx context.Context, ws *watchSet, row *Row, prog func(float64)) error {
	g, gctx := errgroup.WithContext(ctx)
	sem := make(chan struct{}, maxInFlight)
	var mu sync.Mutex
	var lat []time.Duration
	var lastAck atomic.Int64 // Unix ns
	var held int64
	rng := rand.New(rand.NewPCG(3, 7))
	start := time.Now()
	s := schedule{start: start, rate: float64(b.cfg.WatchRate), end: start.Add(b.cfg.Duration)}
	total := float64(pacedCap(b.cfg))
	issued := pace(gctx, wallClock{}, s, func(i int64) {
		if i >= int64(len(ws.sends)) {
			return // cannot happen: pacedCap counts every due put
		}
		k, v := b.key(rng.IntN(b.cfg.Objects)), seqValue(pacedMark, i, b.value)
		select {
		case sem <- struct{}{}:
		default:
			held++
			select {
			case sem <- struct{}{}:
			case <-gctx.Done():
				return
			}
		}
		g.Go(func() error {
			defer func() { <-sem }()
			t0 := time.Now()
			ws.sends[i].Store(t0.UnixNano())
			err := b.retryPut(gctx, func(ctx context.Context) error {
				_, err := b.cli.Put(ctx, k, v)
				return err
			})
			if err != nil {
				return err
			}
			now := time.Now()
			ws.pacedAcks[i].Store(now.UnixNano())
			mu.Lock()
			lat = append(lat, now.Sub(t0))
			mu.Unlock()
			lastAck.Store(now.UnixNano())
			return nil
		})
		if i%256 == 0 {
			prog(float64(i) / total)
		}
	})
	if err := g.Wait(); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	row.PacedPut = distOf(lat)
	if len(lat) > 0 {
		row.PacedPutRate = float64(len(lat)) / time.Duration(lastAck.Load()-start.UnixNano()).Seconds()
	}
	row.PacedHeld = held
	var err error
	row.PacedMissed, err = b.drain(ctx, ws, phasePaced, issued)
	return err
}
