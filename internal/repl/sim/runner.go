package sim

import (
	"fmt"
	"sync"
	"time"
)

// Report is the outcome of many runs.
type Report struct {
	Stats
	Workers int
	Elapsed time.Duration
	// Running is the time spent in runs, summed over the workers
	// (shrinking and tracing failures excluded).
	Running time.Duration
	// Checking is the part of Running spent in porcupine, and
	// LongestCheck the longest check of one history.
	Checking, LongestCheck time.Duration
	Failures               []SeedFailure
}

// SeedFailure is a failing seed with its (shrunk) script and trace.
type SeedFailure struct {
	Seed    uint64
	Failure *Failure
	Shrunk  Script
	Trace   string
}

// StepsPerSecond is the speed of one worker: steps per second of time
// spent running seeds.
func (r *Report) StepsPerSecond() float64 {
	if r.Running <= 0 {
		return 0
	}
	return float64(r.Steps) / r.Running.Seconds()
}

func (r *Report) String() string {
	all := 0.0
	if r.Elapsed > 0 {
		all = float64(r.Steps) / r.Elapsed.Seconds()
	}
	return fmt.Sprintf("%d runs on %d workers in %v: %d steps (%.0f steps/s per worker, %.0f steps/s in all), %d client operations (%d checked by porcupine, %d with unknown outcome), %d faults, %d split brains, %d conflict records, %d unsynced entries lost in crashes, %d batches flushed before they were sent, %d entries shown by an older replica before they were committed, %d failures; %v in porcupine checks (longest %v)",
		r.Runs, r.Workers, r.Elapsed.Round(time.Millisecond), r.Steps, r.StepsPerSecond(), all, r.Ops, r.Checked, r.Unknown, r.Faults, r.SplitBrains, r.Conflicts, r.Lost, r.FlushedFirst, r.ShownEarly, len(r.Failures),
		r.Checking.Round(time.Millisecond), r.LongestCheck.Round(time.Microsecond))
}

// Explore runs seeds from next() on workers goroutines until next reports
// none is left; failing seeds are shrunk (within shrinkBudget runs each)
// and traced. Every worker is joined before it returns.
func Explore(cfg Config, workers int, next func() (uint64, bool), shrinkBudget int) Report {
	workers = max(workers, 1)
	start := time.Now()
	var (
		mu  sync.Mutex // guards rep and next
		rep = Report{Workers: workers}
		wg  sync.WaitGroup
	)
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		return next()
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seed, ok := take()
				if !ok {
					return
				}
				s := Generate(seed, cfg)
				t0 := time.Now()
				r := Run(s, cfg)
				ran := time.Since(t0)
				var sf *SeedFailure
				if r.Failure != nil {
					sf = failure(s, cfg, r.Failure, shrinkBudget)
				}
				mu.Lock()
				rep.add(r.Stats)
				rep.Running += ran
				rep.Checking += r.Checking
				rep.LongestCheck = max(rep.LongestCheck, r.Checking)
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
