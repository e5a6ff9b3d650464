package sim

import (
	"fmt"
	"sync"
	"time"
)

// Report is the outcome of many runs.
type Report struct {
	Stats
	Elapsed  time.Duration
	Failures []SeedFailure
}

// SeedFailure is a failing seed with its (shrunk) script and trace.
type SeedFailure struct {
	Seed    uint64
	Failure *Failure
	Shrunk  Script
	Trace   string
}

// StepsPerSecond is the simulation speed (wall clock).
func (r *Report) StepsPerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Steps) / r.Elapsed.Seconds()
}

func (r *Report) String() string {
	return fmt.Sprintf("%d runs, %d steps in %v (%.0f steps/s), %d client operations (%d checked by porcupine, %d with unknown outcome), %d faults, %d split brains, %d conflict records, %d unsynced entries lost in crashes, %d failures",
		r.Runs, r.Steps, r.Elapsed.Round(time.Millisecond), r.StepsPerSecond(), r.Ops, r.Checked, r.Unknown, r.Faults, r.SplitBrains, r.Conflicts, r.Lost, len(r.Failures))
}

// Explore runs seeds from next() on workers goroutines until next reports
// none is left; failing seeds are shrunk (within shrinkBudget runs each)
// and traced. Every worker is joined before it returns.
func Explore(cfg Config, workers int, next func() (uint64, bool), shrinkBudget int) Report {
	start := time.Now()
	var (
		mu  sync.Mutex // guards rep and next
		rep Report
		wg  sync.WaitGroup
	)
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		return next()
	}
	for range max(workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed, ok := take()
				if !ok {
					return
				}
				s := Generate(seed, cfg)
				r := Run(s, cfg)
				var sf *SeedFailure
				if r.Failure != nil {
					sf = failure(s, cfg, r.Failure, shrinkBudget)
				}
				mu.Lock()
				rep.add(r.Stats)
				if sf != nil {
					rep.Failures = append(rep.Failures, *sf)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	rep.Elapsed = time.Since(start)
	return rep
}

// failure shrinks a failing script and traces the smallest one.
func failure(s Script, cfg Config, f *Failure, budget int) *SeedFailure {
	small, sf := Shrink(s, cfg, f, budget)
	tcfg := cfg
	tcfg.Trace = true
	r := Run(small, tcfg)
	return &SeedFailure{Seed: s.Seed, Failure: sf, Shrunk: small, Trace: r.Describe(small)}
}

// Seeds returns a next function over a fixed list.
func Seeds(list []uint64) func() (uint64, bool) {
	i := 0
	return func() (uint64, bool) {
		if i >= len(list) {
			return 0, false
		}
		i++
		return list[i-1], true
	}
}

// Until returns a next function that counts up from first until the wall
// clock passes deadline.
func Until(first uint64, deadline time.Time) func() (uint64, bool) {
	s := first
	return func() (uint64, bool) {
		if !time.Now().Before(deadline) {
			return 0, false
		}
		s++
		return s - 1, true
	}
}
