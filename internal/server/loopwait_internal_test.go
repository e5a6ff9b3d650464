package server

import (
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/transport"
)

// fakeWaiter records the timeouts of the Waits it is given; loopWait
// calls nothing else (the embedded interface is nil).
type fakeWaiter struct {
	transport.Waiter
	timeouts []time.Duration
}

func (f *fakeWaiter) Waits() bool { return true }
func (f *fakeWaiter) Wake()       {}
func (f *fakeWaiter) Wait(timeout time.Duration) (bool, error) {
	f.timeouts = append(f.timeouts, timeout)
	return false, nil
}

// A loop that keeps finding input queued takes its peer's messages (a
// Wait with no timeout) once pollGap has passed since it last took them,
// by a Wait or a poll, and not before.
func TestLoopWaitPollsAfterTheGap(t *testing.T) {
	const period = int64(100 * time.Millisecond)
	for _, tc := range []struct {
		name string
		// took: the last Wait or poll (0: none since the loop started
		// at 0); now: the loop's clock when it finds input queued.
		lastWait, lastPoll, now int64
		due                     bool
	}{
		{"right after a wait", 1_000, -1, 1_000 + pollGap - 1, false},
		{"a gap after a wait", 1_000, -1, 1_000 + pollGap, true},
		{"right after a poll", 1_000, 5_000, 5_000 + pollGap - 1, false},
		{"a gap after a poll", 1_000, 5_000, 5_000 + pollGap, true},
		{"long busy", 1_000, -1, 1_000 + 50*pollGap, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeWaiter{}
			l := newLoopWait(f, time.Duration(period), 0)
			if err := l.wait(tc.lastWait); err != nil {
				t.Fatal(err)
			}
			if tc.lastPoll >= 0 {
				l.poll(tc.lastPoll)
			}
			if got := l.pollDue(tc.now); got != tc.due {
				t.Fatalf("pollDue at %d = %v, want %v", tc.now, got, tc.due)
			}
			if tc.lastPoll >= 0 && f.timeouts[len(f.timeouts)-1] != 0 {
				t.Fatalf("a poll waited %v, want a Wait that does not block", f.timeouts[len(f.timeouts)-1])
			}
		})
	}
}
