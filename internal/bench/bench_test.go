package bench

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/workload"
)

// TestWeight: a target's share of the progress bar is its cells' expected
// milliseconds plus the Extra's own estimate (one cell without one).
func TestWeight(t *testing.T) {
	extra := func(context.Context, target.Target, []string, *report.Report, func(string, float64)) error {
		return nil
	}
	ops := []workload.Op{workload.Put, workload.RangeL}
	tests := []struct {
		name string
		cfg  Config
		want targetWeight
	}{
		{"matrix only", Config{Ops: ops, Clients: []int{1, 8}, Duration: 1500 * time.Millisecond, Warmup: 500 * time.Millisecond},
			targetWeight{cells: 4, cell: 2000}},
		{"a count of requests", Config{Ops: ops, Clients: []int{1}, OpCount: 1000},
			targetWeight{cells: 2, cell: 1000}},
		{"extra without an estimate", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Extra: extra},
			targetWeight{cells: 2, cell: 1000, extra: 1000}},
		{"extra with an estimate", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Extra: extra,
			ExtraTime: func(target.Target) time.Duration { return 5 * time.Minute }},
			targetWeight{cells: 2, cell: 1000, extra: 300_000}},
	}
	for _, tt := range tests {
		got := tt.cfg.weight(nil)
		if got != tt.want {
			t.Errorf("%s: %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

// deadTarget "starts" on an address nothing listens on: a target that died
// right after it came up.
type deadTarget struct{ ep string }

func (d deadTarget) Name() string                            { return "dead" }
func (d deadTarget) Start(context.Context) ([]string, error) { return []string{d.ep}, nil }
func (d deadTarget) Stop() error                             { return nil }
func (d deadTarget) Version() string                         { return "none" }

// TestDeadTargetEndsTheCell: a target that stops answering fails its cell
// within the cell's limit (and the rest of its matrix is skipped) instead
// of holding the bench forever.
func TestDeadTargetEndsTheCell(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ep := l.Addr().String()
	l.Close() // nothing listens there any more
	cfg := Config{Ops: []workload.Op{workload.RangeL, workload.Put}, Clients: []int{1},
		Duration: 100 * time.Millisecond, CellGrace: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr := runTarget(ctx, cfg, deadTarget{ep}, &report.Report{}, func(string) {}, func(bool) {}, func(float64) {}, func() {})
	if ctx.Err() != nil {
		t.Fatal("the cell held the bench past a minute")
	}
	if !strings.Contains(tr.Error, "no answer within") || len(tr.Results) != 0 {
		t.Fatalf("error %q with %d results, want the first cell to fail as unanswered", tr.Error, len(tr.Results))
	}
}

// floorSection is a report section a Floor adds.
type floorSection struct{}

func (floorSection) Title() string { return "Floor under test" }
func (floorSection) Markdown(w io.Writer) error {
	_, err := io.WriteString(w, "floor figures\n")
	return err
}
func (floorSection) HTML(w io.Writer) error { return nil }

// TestFloorRunsFirst: the Floor runs before any target starts, its
// section reaches the written report, its failure is a note there, and a
// run cancelled during the Floor starts no target.
func TestFloorRunsFirst(t *testing.T) {
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	targetsSeen := -1
	cfg := Config{
		Targets: []string{"external"}, Clients: []int{1}, Out: out,
		Env: target.Env{WorkDir: t.TempDir(), External: []string{"127.0.0.1:1"}},
		Floor: func(_ context.Context, rep *report.Report, progress func(string, float64)) error {
			targetsSeen = len(rep.Targets)
			rep.Sections = append(rep.Sections, floorSection{})
			progress("floor", 1)
			cancel()
			return errors.New("no round trip")
		},
		FloorTime: time.Second,
	}
	rep, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Run: %v, want the cancellation", err)
	}
	if targetsSeen != 0 {
		t.Errorf("the floor saw %d targets, want it to run first", targetsSeen)
	}
	if len(rep.Targets) != 0 {
		t.Errorf("targets %+v ran after a cancellation", rep.Targets)
	}
	md, err := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"## Floor under test", "floor figures", "The write floor was not measured in full: no round trip"} {
		if !strings.Contains(string(md), s) {
			t.Errorf("summary lacks %q:\n%s", s, md)
		}
	}
}
