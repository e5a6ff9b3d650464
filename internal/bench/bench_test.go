package bench

import (
	"context"
	"errors"
	"fmt"
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
			targetWeight{cells: 2, cell: 1000, extra: 1000, extraRounds: 1}},
		{"extra with an estimate", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Extra: extra,
			ExtraTime: func(target.Target) time.Duration { return 5 * time.Minute }},
			targetWeight{cells: 2, cell: 1000, extra: 300_000, extraRounds: 1}},
		{"three rounds", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Rounds: 3, Extra: extra},
			targetWeight{cells: 6, cell: 1000, extra: 1000, extraRounds: 1}},
		{"three rounds, the extra in each", Config{Ops: ops, Clients: []int{1}, Duration: time.Second, Rounds: 3, Extra: extra, ExtraEachRound: true},
			targetWeight{cells: 6, cell: 1000, extra: 1000, extraRounds: 3}},
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
	tr := runTarget(ctx, cfg, deadTarget{ep}, &report.Report{}, true, func(string) {}, func(bool) {}, func(float64) {}, func() {})
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

// The Extra runs only when runTarget is told to (Config.extraIn).
func TestRunTargetRunsTheExtraWhenTold(t *testing.T) {
	for _, last := range []bool{false, true} {
		ran := false
		cfg := Config{Clients: []int{1}, Extra: func(context.Context, target.Target, []string, *report.Report, func(string, float64)) error {
			ran = true
			return nil
		}}
		tr := runTarget(context.Background(), cfg, deadTarget{"127.0.0.1:1"}, &report.Report{}, last,
			func(string) {}, func(bool) {}, func(float64) {}, func() {})
		if ran != last || tr.Error != "" {
			t.Errorf("told %v: Extra ran %v (error %q)", last, ran, tr.Error)
		}
	}
}

// The Extra runs in the last round only, or in every round with
// ExtraEachRound.
func TestExtraIn(t *testing.T) {
	tests := []struct {
		rounds int
		each   bool
		want   []bool // by round, from 1
	}{
		{rounds: 0, want: []bool{true}},
		{rounds: 1, want: []bool{true}},
		{rounds: 3, want: []bool{false, false, true}},
		{rounds: 3, each: true, want: []bool{true, true, true}},
	}
	for _, tt := range tests {
		cfg := Config{Rounds: tt.rounds, ExtraEachRound: tt.each}
		for i, want := range tt.want {
			if got := cfg.extraIn(i + 1); got != want {
				t.Errorf("rounds %d, each round %v: extraIn(%d) = %v, want %v", tt.rounds, tt.each, i+1, got, want)
			}
		}
	}
}

// poolTarget reads a target's rounds as one: each cell pooled, in the
// first round's order, and the first error with its round.
func TestPoolTarget(t *testing.T) {
	res := func(op workload.Op, clients int, ops int64) workload.Result {
		return workload.Result{Op: op, Clients: clients, Ops: ops, Elapsed: 1, Throughput: float64(ops)}
	}
	tests := []struct {
		name    string
		runs    []report.Target
		err     string
		cells   []string // op/clients: ops, in order
		perCell [][]float64
	}{
		{"one round as it is", []report.Target{{Name: "x", Results: []workload.Result{res(workload.Put, 1, 10)}}},
			"", []string{"put/1: 10"}, [][]float64{nil}},
		{"two rounds", []report.Target{
			{Name: "x", Results: []workload.Result{res(workload.Put, 1, 10), res(workload.Put, 64, 100)}},
			{Name: "x", Results: []workload.Result{res(workload.Put, 1, 30), res(workload.Put, 64, 300)}}},
			"", []string{"put/1: 40", "put/64: 400"}, [][]float64{{10, 30}, {100, 300}}},
		{"the second round failed half-way", []report.Target{
			{Name: "x", Results: []workload.Result{res(workload.Put, 1, 10), res(workload.Put, 64, 100)}},
			{Name: "x", Error: "put with 64 clients: gone", Results: []workload.Result{res(workload.Put, 1, 30)}}},
			"round 2: put with 64 clients: gone", []string{"put/1: 40", "put/64: 100"}, [][]float64{{10, 30}, nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := poolTarget(tt.runs)
			if got.Error != tt.err || got.Name != "x" {
				t.Errorf("target %q error %q, want x and %q", got.Name, got.Error, tt.err)
			}
			var cells []string
			var per [][]float64
			for _, r := range got.Results {
				cells = append(cells, fmt.Sprintf("%s/%d: %d", r.Op, r.Clients, r.Ops))
				per = append(per, r.RoundsOpsPerS)
			}
			if fmt.Sprint(cells) != fmt.Sprint(tt.cells) || fmt.Sprint(per) != fmt.Sprint(tt.perCell) {
				t.Errorf("cells %v rounds %v, want %v and %v", cells, per, tt.cells, tt.perCell)
			}
		})
	}
}
