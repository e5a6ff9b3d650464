package scale

import (
	"context"
	"strings"
	"testing"
	"time"
)

// fakeClock reads a time that only SleepUntil and the test move.
type fakeClock struct {
	now    time.Time
	sleeps int
}

func (c *fakeClock) Now() time.Time { return c.now }

func (c *fakeClock) SleepUntil(_ context.Context, t time.Time) {
	c.sleeps++
	if t.After(c.now) {
		c.now = t
	}
}

// TestPace: the pacer issues every put due before the end at its due
// time; when it falls behind (a put's issue takes the clock past the next
// due times) it issues the overdue puts at once, without sleeping,
// skipping none and moving none of the later ones; it stops when its
// context ends.
func TestPace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(f float64) time.Time { return t0.Add(time.Duration(f * float64(time.Millisecond))) }
	for _, tc := range []struct {
		name   string
		rate   float64
		length time.Duration
		stall  map[int64]time.Duration // the clock moves this much while put i is issued
		cancel int64                   // the context ends while this put is issued (-1: never)
		want   []time.Time             // issue times
		sleeps int
	}{
		{name: "on time", rate: 1000, length: 5 * time.Millisecond, cancel: -1,
			want: []time.Time{ms(0), ms(1), ms(2), ms(3), ms(4)}, sleeps: 4},
		{name: "fractional interval", rate: 3, length: time.Second, cancel: -1,
			want: []time.Time{ms(0), t0.Add(time.Second / 3), t0.Add(2 * time.Second / 3)}, sleeps: 2},
		{name: "late: overdue puts at once, later ones on time", rate: 1000, length: 7 * time.Millisecond, cancel: -1,
			stall: map[int64]time.Duration{1: 2500 * time.Microsecond},
			// put 1 at 1 ms takes the clock to 3.5 ms: puts 2 and 3 are
			// overdue and go at once, put 4 waits for 4 ms.
			want:   []time.Time{ms(0), ms(1), ms(3.5), ms(3.5), ms(4), ms(5), ms(6)},
			sleeps: 4},
		{name: "context ends", rate: 1000, length: 10 * time.Millisecond, cancel: 2,
			want: []time.Time{ms(0), ms(1), ms(2)}, sleeps: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &fakeClock{now: t0}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var got []time.Time
			var seq []int64
			n := pace(ctx, c, schedule{start: t0, rate: tc.rate, end: t0.Add(tc.length)}, func(i int64) {
				got = append(got, c.now)
				seq = append(seq, i)
				c.now = c.now.Add(tc.stall[i])
				if i == tc.cancel {
					cancel()
				}
			})
			if n != int64(len(tc.want)) || len(got) != len(tc.want) {
				t.Fatalf("issued %d puts (returned %d), want %d: %v", len(got), n, len(tc.want), got)
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) || seq[i] != int64(i) {
					t.Errorf("put %d (seq %d) issued at %v, want %v", i, seq[i], got[i].Sub(t0), tc.want[i].Sub(t0))
				}
			}
			if c.sleeps != tc.sleeps {
				t.Errorf("slept %d times, want %d", c.sleeps, tc.sleeps)
			}
		})
	}
}

// TestPacedCap: the sends table has room for every put the schedule can
// issue.
func TestPacedCap(t *testing.T) {
	for _, tc := range []struct {
		rate int
		d    time.Duration
	}{{1000, 5 * time.Second}, {3, time.Second}, {7, 1500 * time.Millisecond}, {1, time.Millisecond}} {
		t0 := time.Unix(0, 0)
		n := pace(context.Background(), &fakeClock{now: t0}, schedule{start: t0, rate: float64(tc.rate), end: t0.Add(tc.d)}, func(int64) {})
		if c := pacedCap(Config{WatchRate: tc.rate, Duration: tc.d}); int64(c) < n {
			t.Errorf("rate %d for %v: %d puts issued, room for %d", tc.rate, tc.d, n, c)
		}
	}
}

// TestSeqValue: a timed value carries its phase's mark and its sequence
// number, keeps the object's size, and no untimed value reads as timed.
func TestSeqValue(t *testing.T) {
	fill := strings.Repeat("p", 64)
	for _, tc := range []struct {
		name   string
		value  string
		mark   byte
		seq    int64
		timed  bool
		length int
	}{
		{name: "first", value: seqValue(pacedMark, 0, fill), mark: pacedMark, seq: 0, timed: true, length: 64},
		{name: "later", value: seqValue(pacedMark, 4321, fill), mark: pacedMark, seq: 4321, timed: true, length: 64},
		{name: "closed-loop", value: seqValue(closedMark, 77, fill), mark: closedMark, seq: 77, timed: true, length: 64},
		{name: "widest", value: seqValue(pacedMark, 999999999999999, fill), mark: pacedMark, seq: 999999999999999, timed: true, length: 64},
		{name: "fill shorter than the mark", value: seqValue(closedMark, 5, "pp"), mark: closedMark, seq: 5, timed: true, length: 1 + seqDigits},
		{name: "untimed value", value: fill, length: 64},
		{name: "marked, not a number", value: "#abcdefghijklmnopq", length: 18},
		{name: "another mark", value: "%000000000000001ppp", length: 19},
		{name: "too short", value: "@12", length: 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mark, seq, ok := seqOf([]byte(tc.value))
			if ok != tc.timed || seq != tc.seq || mark != tc.mark {
				t.Errorf("seqOf(%.20q) = %q, %d, %v; want %q, %d, %v", tc.value, mark, seq, ok, tc.mark, tc.seq, tc.timed)
			}
			if len(tc.value) != tc.length {
				t.Errorf("len = %d, want %d", len(tc.value), tc.length)
			}
		})
	}
}
