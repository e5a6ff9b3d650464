package bench

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/bench"
	"github.com/dyad-db/dyad/internal/bench/scale"
	"github.com/dyad-db/dyad/internal/bench/target"
	"github.com/dyad-db/dyad/test/testutil"
)

// TestBenchScaleSmoke runs the scale profile small (2,000 objects, 100
// watchers, 1 s phases) on dyad and etcd-1 and checks what does not depend
// on the machine's speed: every phase ran, every watch event was
// delivered (the paced phase's too, one per put), LIST pages were read,
// and the target served reads and writes again after the restart.
func TestBenchScaleSmoke(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	etcd := testutil.RequireBinary(t, "etcd-3.6")
	sb := &scale.Bench{Config: scale.Config{Objects: 2000, ObjectSize: 512, Watchers: 100, Writers: 2, Listers: 1,
		WatchRate: 200, PageSize: 500, Duration: time.Second, Prefix: "/registry/bench.dyad.io/dyad-bench/"}}
	cfg := bench.Config{
		Targets: []string{"dyad", "etcd-1"}, Clients: []int{1},
		Seed: 7, Out: t.TempDir(), Command: "scale smoke test", Extra: sb.Run, ExtraTime: sb.Expected,
		Env: target.Env{Bins: target.Bins{Dyad: dyad, PeersDir: filepath.Dir(etcd)}, WorkDir: t.TempDir()},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		t.Fatalf("bench.Run: %v", err)
	}
	res, ok := rep.Extras[scale.Profile].(*scale.Result)
	if !ok || len(res.Rows) != 2 {
		t.Fatalf("scale: %+v", rep.Extras[scale.Profile])
	}
	for _, r := range res.Rows {
		if r.Err != "" {
			t.Errorf("%s: %s", r.Target, r.Err)
			continue
		}
		if r.Load <= 0 || r.Get.N == 0 || r.PutRate <= 0 || r.PutRateWatched <= 0 || r.Put.N == 0 || r.PutStorm.N == 0 || r.ListPages == 0 {
			t.Errorf("%s: a phase measured nothing: %+v", r.Target, r)
		}
		if r.WatchLag.N == 0 || r.Missed != 0 {
			t.Errorf("%s: %d watch events delivered, %d missed", r.Target, r.WatchLag.N, r.Missed)
		}
		// 100 watchers on 100 namespaces: each paced put reaches one.
		if r.PacedPut.N == 0 || r.PacedPutRate <= 0 || r.PacedLag.N != r.PacedPut.N || r.PacedMissed != 0 {
			t.Errorf("%s: paced: %d puts acknowledged (%.0f/s), %d watch events delivered, %d missed",
				r.Target, r.PacedPut.N, r.PacedPutRate, r.PacedLag.N, r.PacedMissed)
		}
		if r.Serve <= 0 || r.PortOpen <= 0 {
			t.Errorf("%s: port open %v, serving %v after the restart", r.Target, r.PortOpen, r.Serve)
		}
	}
}
