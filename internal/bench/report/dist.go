package report

import (
	"math"
	"slices"
	"time"
)

// Dist summarises durations: nearest-rank percentiles of the exact values.
type Dist struct {
	N                        int
	P50, P90, P99, P999, Max time.Duration
}

// DistOf summarises ds (which it does not modify); the zero Dist when ds
// is empty.
func DistOf(ds []time.Duration) Dist {
	if len(ds) == 0 {
		return Dist{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p float64) time.Duration {
		i := int(math.Ceil(p/100*float64(len(s)))) - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Dist{N: len(s), P50: at(50), P90: at(90), P99: at(99), P999: at(99.9), Max: s[len(s)-1]}
}
