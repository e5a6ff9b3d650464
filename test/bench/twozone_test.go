package bench

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench"
	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/internal/bench/twozone"
	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// TestBenchTwoZoneSmoke runs every two-zone benchmark briefly: on
// dyad-pair the replication measurement, a failover series of 2 kills, a
// few seconds with CPU hogs and puts on a copy whose zones are 2 ms apart;
// on a two-member etcd the contrast. It checks
// the properties the benchmarks report as pass/fail where they do not
// depend on the machine's speed: no acknowledged write lost, both nodes'
// HashKV equal, every write delivered to the other zone's watch, writes
// resuming on the survivor after each kill, no false failover; and that
// etcd with one of two members left freezes writes and loses nothing.
func TestBenchTwoZoneSmoke(t *testing.T) {
	testenv.NeedRoot(t, "for dyad-pair's network namespaces")
	dyad := testutil.BuildDyad(t)
	etcd := testutil.RequireBinary(t, "etcd-3.6")
	out := t.TempDir()
	const delay = 2 * time.Millisecond
	tz := &twozone.Bench{Selected: twozone.Profiles, Config: twozone.Config{
		Kills: 2, Settle: 500 * time.Millisecond, Writers: 2, Readers: 1,
		Duration: 2 * time.Second, LoadDuration: 2 * time.Second, Window: 2 * time.Second,
		Delays: []time.Duration{delay}, DelayDuration: time.Second, DelayClients: 4,
		ValueSize: 64, Prefix: "dyad-bench/",
	}}
	cfg := bench.Config{
		Targets: []string{"dyad-pair", "etcd-2"}, Clients: []int{1},
		Seed: 7, Out: out, Command: "two-zone smoke test", Extra: tz.Run,
		Env: target.Env{Bins: target.Bins{Dyad: dyad, PeersDir: filepath.Dir(etcd)}, WorkDir: t.TempDir()},
	}
	tz.Env = cfg.Env
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("bench.Run: %v", err)
	}
	for _, tr := range rep.Targets {
		if tr.Error != "" {
			t.Errorf("%s failed: %s", tr.Name, tr.Error)
		}
	}

	repl, ok := rep.Extras["replication/dyad-pair"].(*twozone.ReplicationResult)
	if !ok {
		t.Fatalf("no replication result: %v", rep.Extras)
	}
	if repl.Writes == 0 || repl.All.N != repl.Writes || repl.Undelivered != 0 {
		t.Errorf("replication: %d writes, %d deliveries measured, %d undelivered", repl.Writes, repl.All.N, repl.Undelivered)
	}
	if !(repl.All.P50 <= repl.All.P99 && repl.All.P99 <= repl.All.Max) {
		t.Errorf("replication latency percentiles out of order: %+v", repl.All)
	}
	if !repl.Hash.Equal {
		t.Errorf("replication: HashKV differs: %+v", repl.Hash)
	}
	for z, r := range repl.Reads {
		if r.N == 0 {
			t.Errorf("replication: no linearizable read completed on zone %c", 'a'+z)
		}
	}

	fo, ok := rep.Extras["failover/dyad-pair"].(*twozone.FailoverResult)
	if !ok {
		t.Fatal("no failover result")
	}
	if len(fo.Kills) != 2 || fo.Failed() != 0 {
		t.Errorf("failover: %d kills, %d failed: %+v", len(fo.Kills), fo.Failed(), fo.Kills)
	}
	if fo.Lost() != 0 || fo.Acked == 0 {
		t.Errorf("failover: %d acknowledged writes lost of %d", fo.Lost(), fo.Acked)
	}
	if !fo.Hash.Equal {
		t.Errorf("failover: HashKV differs after the series: %+v", fo.Hash)
	}
	for i, k := range fo.Kills {
		if k.Outage <= 0 || k.NewWrites == 0 || k.Resync <= 0 || k.Failovers != 1 {
			t.Errorf("kill %d: outage %v, %d new writes, resync %v, %d failovers on the survivor", i+1, k.Outage, k.NewWrites, k.Resync, k.Failovers)
		}
		// M2's phases: both zones wrote before the kill, the survivor
		// alone after it; the rejoin window exists (it may be too short
		// to hold a write).
		ph := k.Phases
		if ph[twozone.PhaseSteady].Writes == 0 || ph[twozone.PhaseZoneLost].Writes == 0 || ph[twozone.PhaseRejoin].Seconds <= 0 {
			t.Errorf("kill %d: phases %+v: want writes in steady state and with a zone lost, and a rejoin window", i+1, ph)
		}
		// After a failover the survivor leads, so the next kill takes
		// the other zone.
		if i > 0 && k.Victim == fo.Kills[i-1].Victim {
			t.Errorf("kills %d and %d both took zone %s", i, i+1, k.Victim)
		}
	}

	load, ok := rep.Extras["load/dyad-pair"].(*twozone.LoadResult)
	if !ok {
		t.Fatal("no load result")
	}
	if load.Writes == 0 || load.FalseFailovers != 0 {
		t.Errorf("load: %d writes, %d false failovers", load.Writes, load.FalseFailovers)
	}

	con, ok := rep.Extras["contrast"].(*twozone.ContrastResult)
	if !ok || len(con.Rows) != 1 {
		t.Fatalf("contrast: %+v", rep.Extras["contrast"])
	}
	if row := con.Rows[0]; row.Err != "" || !row.Frozen || row.Lost != 0 || row.Acked == 0 || row.Recovery <= 0 {
		t.Errorf("etcd-2 with one member killed: %+v (want writes frozen, recovery after the restart, nothing lost)", row)
	}

	// The delayed pair: every acknowledged put crossed the zones at least
	// once there and back, so none took less than twice the delay.
	dl, ok := rep.Extras["delay"].(*twozone.DelayResult)
	if !ok || len(dl.Rows) != 1 {
		t.Fatalf("delay: %+v", rep.Extras["delay"])
	}
	if row := dl.Rows[0]; row.Err != "" || row.Target != "dyad-pair@2ms" || row.One.Ops == 0 || row.Many.Ops == 0 ||
		row.One.Errors != 0 || row.Many.Errors != 0 {
		t.Errorf("dyad-pair 2 ms apart: %+v", row)
	} else if h := row.One.Histogram(); h == nil || time.Duration(h.Min())*time.Microsecond < 2*delay {
		t.Errorf("dyad-pair 2 ms apart: no histogram, or a put faster than the round trip between the zones %v", 2*delay)
	}

	md, _ := os.ReadFile(filepath.Join(out, report.MarkdownFile))
	html, _ := os.ReadFile(filepath.Join(out, report.HTMLFile))
	for _, s := range []string{repl.Title(), fo.Title(), load.Title(), con.Title(), dl.Title()} {
		if !strings.Contains(string(md), "## "+s) {
			t.Errorf("summary.md lacks the section %q", s)
		}
	}
	// The lag-over-time, outage timeline and outage-per-kill plots.
	if n := strings.Count(string(html), "<svg"); n < 3 {
		t.Errorf("index.html holds %d plots, want at least 3", n)
	}
}
