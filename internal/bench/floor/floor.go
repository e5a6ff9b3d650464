package floor

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/dyad-db/dyad/internal/bench/netns"
	"github.com/dyad-db/dyad/internal/bench/report"
)

// Layout is how the two zones are joined for a round trip: as dyad-pair
// lays them out (one veth between the zones), or through the userspace
// shaper with Delay each way, as dyad-pair@<delay> and the delay profile
// lay them out.
type Layout struct {
	Shaped bool          `json:"shaped"`
	Delay  time.Duration `json:"delay_ns"` // one way; only when Shaped
}

// Direct is dyad-pair's own layout.
var Direct = Layout{}

// Shaped is the layout of a target whose zones are delay apart.
func Shaped(delay time.Duration) Layout { return Layout{Shaped: true, Delay: delay} }

func (l Layout) String() string {
	if !l.Shaped {
		return "veth (dyad-pair's layout)"
	}
	return fmt.Sprintf("shaper, %v each way", l.Delay)
}

// LayoutOf is the layout target name runs its zones in: "<system>@<delay>"
// is shaped that far apart, any other name direct.
func LayoutOf(name string) Layout {
	if _, d, ok := strings.Cut(name, "@"); ok {
		if delay, err := time.ParseDuration(d); err == nil && delay >= 0 {
			return Shaped(delay)
		}
	}
	return Direct
}

// RoundTrip measures count round trips of size-byte DDS messages between
// zone a and zone b of net, with the real binding.
type RoundTrip func(ctx context.Context, net *netns.Pair, size, count int) (report.Dist, error)

// Config is one floor measurement.
type Config struct {
	// Dir is the targets' work directory; the fdatasync file is made in
	// a subdirectory of it, as each target's data directory is.
	Dir string
	// Size is the record's and the message's size in bytes (the bench's
	// value size).
	Size int
	// Samples is the number of fdatasyncs timed, and of round trips per
	// layout (fewer when the zones are far apart, see count).
	Samples int
	// Layouts are the zone layouts whose round trip is measured, in order.
	Layouts []Layout
	// RoundTrip measures them; Method says what it is, for the report.
	RoundTrip RoundTrip
	Method    string
	// Reference, when set, is a second round trip measured in the same
	// namespaces for comparison (Cyclone's ddsperf), not part of the
	// floor; RefName names it.
	Reference RoundTrip
	RefName   string
}

// syncLimit bounds the fdatasync samples on a slow disk.
const syncLimit = 5 * time.Second

// tripBudget is what the round trips of one delayed layout should take.
const tripBudget = 2 * time.Second

// minTrips is the fewest round trips a layout gets.
const minTrips = 100

// count is the number of round trips measured in layout l: Samples, or
// fewer when the zones are so far apart that they would take longer than
// tripBudget, but at least minTrips.
func (c Config) count(l Layout) int {
	n := max(c.Samples, 1)
	if l.Delay > 0 {
		n = min(n, max(minTrips, int(tripBudget/(2*l.Delay))))
	}
	return n
}

// Expected is roughly how long Run takes, for the progress bar: the
// fdatasyncs at about a millisecond each, and per layout the namespaces,
// the two processes' start and discovery (about 3 s) and its round trips.
func (c Config) Expected() time.Duration {
	d := min(time.Duration(c.Samples)*time.Millisecond, syncLimit)
	for _, l := range c.Layouts {
		d += 3*time.Second + time.Duration(c.count(l))*(2*l.Delay+300*time.Microsecond)
		if c.Reference != nil {
			d += 4 * time.Second // ddsperf runs for a time, not a count
		}
	}
	return d
}

// SyncDir is the subdirectory of the work directory the fdatasyncs hit.
const SyncDir = "floor"

// Run measures the floor and adds its section to rep (and to rep.Extras
// as "floor"). A part that fails is shown with its error; the error
// returned joins them.
func (c Config) Run(ctx context.Context, rep *report.Report, progress func(desc string, frac float64)) error {
	res := &Result{Size: c.Size, Method: c.Method, RefName: c.RefName, rep: rep}
	rep.Sections = append(rep.Sections, res)
	if rep.Extras == nil {
		rep.Extras = map[string]any{}
	}
	rep.Extras["floor"] = res
	steps := float64(1 + len(c.Layouts))
	var errs []error
	progress("floor: fdatasync", 0)
	var err error
	res.Sync, err = Sync(SyncConfig{Dir: dirOf(c.Dir), Record: c.Size, Samples: c.Samples, Limit: syncLimit})
	if err != nil {
		res.SyncErr = err.Error()
		errs = append(errs, fmt.Errorf("fdatasync: %w", err))
	}
	for i, l := range c.Layouts {
		if ctx.Err() != nil {
			break
		}
		progress("floor: round trip, "+l.String(), float64(1+i)/steps)
		trip, err := c.trip(ctx, l)
		if err != nil {
			errs = append(errs, fmt.Errorf("round trip, %s: %w", l, err))
		}
		res.Trips = append(res.Trips, trip)
	}
	progress("floor", 1)
	return errors.Join(errs...)
}

func dirOf(workDir string) string { return filepath.Join(workDir, SyncDir) }

// trip builds l's namespaces, measures the round trips (and the
// reference's) and removes them. A failure of the reference is kept in
// the Trip, not returned: the floor does not need it.
func (c Config) trip(ctx context.Context, l Layout) (t Trip, err error) {
	t = Trip{Layout: l}
	defer func() {
		if err != nil {
			t.Err = err.Error()
		}
	}()
	if c.RoundTrip == nil {
		return t, errors.New("no round-trip measurement given")
	}
	np, err := netns.NewWith(netns.Options{Delay: l.Delay, Hub: l.Shaped})
	if err != nil {
		return t, err
	}
	defer func() { err = errors.Join(err, np.Close()) }()
	if t.RTT, err = c.RoundTrip(ctx, np, c.Size, c.count(l)); err != nil {
		return t, err
	}
	if c.Reference != nil {
		var rerr error
		if t.Ref, rerr = c.Reference(ctx, np, c.Size, c.count(l)); rerr != nil {
			t.RefErr = rerr.Error()
		}
	}
	return t, nil
}
