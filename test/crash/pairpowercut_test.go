package crash

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/test/testutil"
	"github.com/dyad-db/dyad/test/testutil/powerfs"
)

// envPairCycles sets TestPairPowerCut's number of cuts (default 6; the long
// run is DYAD_PAIR_POWERCUT_CYCLES=60 go test -run TestPairPowerCut
// -timeout 60m ./test/crash).
const envPairCycles = "DYAD_PAIR_POWERCUT_CYCLES"

// pairCut is what one cycle of TestPairPowerCut cuts.
type pairCut int

const (
	// cutSite: both zones lose power at the same instant (one feed for
	// both rooms). An acknowledged write was durable on both nodes, so
	// both come back with it whichever leads next.
	cutSite pairCut = iota
	// cutPrimary: the primary's zone alone. Its unsynced tail (sent to
	// the replica before its own flush ended, never acknowledged) is
	// rolled back; the replica takes over, acknowledges writes alone,
	// and the old primary rejoins behind it.
	cutPrimary
	// cutReplica: the replica's zone alone; the primary goes on alone and
	// the replica rejoins behind it.
	cutReplica
)

func (c pairCut) String() string {
	return [...]string{"site", "primary", "replica"}[c]
}

// TestPairPowerCut runs a pair whose data dirs are each on their own
// powerfs (test/testutil/powerfs), in two network namespaces, and cuts the
// power again and again while 8 clients write through both endpoints:
// both zones at once, the primary's alone, or the replica's alone, in
// turn. Each cut lands where the cut node's disk holds unsynced data: just
// after a random write, or instead of one in the middle of a flush.
// Unsynced data is rolled back, cleanly or torn, and the cut nodes restart
// on what a rebooted machine would find. The single-zone cuts let the
// other node take over and acknowledge writes alone before the cut one
// comes back. After each cycle, once the pair has formed again and both
// nodes agree (a marker write read on both, HashKV equal):
//   - every acknowledged write is on both nodes at the revision it was
//     acknowledged at (none lost, none moved);
//   - the revision never runs backwards;
//   - the hash of the history up to each earlier cycle's marker (HashKV)
//     is unchanged on both nodes: no cut rewrote durable history.
//
// Parallel durability is what this exercises: the primary publishes a
// batch before its own flush ends, so a primary that loses power may come
// back without entries its replica holds, and a replica that loses power
// may lose entries it had not acknowledged.
func TestPairPowerCut(t *testing.T) {
	powerfs.Need(t)
	cycles := int(envInt(envPairCycles, 6))
	seed := envInt(envSeed, time.Now().UnixNano())
	t.Logf("%s=%d %s=%d", envPairCycles, cycles, envSeed, seed)
	rng := rand.New(rand.NewSource(seed))

	p := testutil.NewPair(t, testutil.BuildDyad(t), time.Second)
	base := t.TempDir()
	var disks, mnts [2]string
	var fss [2]*powerfs.FS
	for _, z := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
		disks[z], mnts[z] = filepath.Join(base, "disk-"+z.String()), filepath.Join(base, "mnt-"+z.String())
		if err := os.MkdirAll(mnts[z], 0o700); err != nil {
			t.Fatal(err)
		}
		fs, err := powerfs.Mount(disks[z], mnts[z])
		if err != nil {
			t.Fatal(err)
		}
		fss[z] = fs
		p.SetDataDir(z, filepath.Join(mnts[z], "data"))
	}
	// Registered after NewPair's cleanups, so it runs before them: kill
	// the nodes first, then unmount (a mount in use cannot be unmounted).
	t.Cleanup(func() {
		for _, z := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
			p.Kill(z)
			fss[z].Close()
		}
	})
	p.Start(testutil.ZoneA)
	p.Start(testutil.ZoneB)
	leader := p.WaitPair(60 * time.Second)

	var acked acks
	checkpoints := map[int64]uint32{} // marker revision -> HashKV on both nodes
	var lastRev int64
	var stats struct {
		cutCounts
		cuts, nodeCuts, failovers int
	}
	for cycle := 0; cycle < cycles; cycle++ {
		kind := pairCut(cycle % 3)
		var victims []testutil.Zone
		switch kind {
		case cutSite:
			victims = []testutil.Zone{leader, leader.Other()}
		case cutPrimary:
			victims = []testutil.Zone{leader}
		case cutReplica:
			victims = []testutil.Zone{leader.Other()}
		}
		// The trigger is on the first victim's disk; in a site cut the
		// other zone loses power the same instant.
		trig := pickTrigger(rng, 1+cycle%2) // after a write, or mid-flush
		cli, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{p.Endpoint(leader), p.Endpoint(leader.Other())},
			DialTimeout: 2 * time.Second,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		fss[victims[0]].Arm(trig.arm)
		// A failed put's outcome is unknown; its writer goes on with the
		// next key, which the client sends to the other zone once the
		// cut one stops answering.
		wait := writeUntil(ctx, cli, 8, func(w, i int) string { return fmt.Sprintf("ppc/%03d/w%d/%06d", cycle, w, i) }, &acked, true)
		fellBack := false
		select {
		case <-fss[victims[0]].CutC():
		case <-time.After(5 * time.Second):
			fellBack = true
		}
		for _, v := range victims {
			fss[v].Cut()
		}
		for _, v := range victims {
			p.Kill(v)
		}
		if len(victims) == 1 {
			// The other zone takes over (or goes on alone) and
			// acknowledges writes while the cut one is down.
			survivor := victims[0].Other()
			p.WaitLeading(survivor, 15*time.Second)
			if survivor != leader {
				stats.failovers++
			}
			before := acked.len()
			if !waitFor(15*time.Second, func() bool { return acked.len() >= before+50 }) {
				t.Fatalf("cycle %d (%s cut): node %v acknowledged fewer than 50 writes within 15 s of leading alone", cycle, kind, survivor)
			}
		}
		cancel()
		wait()
		cli.Close()

		for i, v := range victims {
			mode := powerfs.Clean
			if rng.Intn(2) == 0 {
				mode = powerfs.Torn
			}
			rep, err := fss[v].Crash(mode, rng)
			if err != nil {
				t.Fatalf("cycle %d: crash of %v: %v", cycle, v, err)
			}
			stats.nodeCuts++
			stats.add(mode, rep)
			// Only the triggered disk is sure to hold unsynced data.
			if i == 0 && !fellBack && !hit(rep) {
				t.Fatalf("cycle %d (%s cut, %s, %s): the cut found nothing unsynced on %v (%+v)", cycle, kind, trig.name, mode, v, rep)
			}
			t.Logf("cycle %d (%s cut, %s): node %v %s: rolled back files %d, sectors lost %d / kept %d, dir ops %d",
				cycle, kind, trig.name, v, mode, rep.FilesReverted, rep.SectorsLost, rep.SectorsKept, rep.DirOpsUndone)
			if fss[v], err = powerfs.Mount(disks[v], mnts[v]); err != nil {
				t.Fatal(err)
			}
		}
		stats.cuts++
		for _, v := range victims {
			p.Start(v)
		}
		leader = p.WaitPair(60 * time.Second)
		rev := p.Converged(leader)
		if rev < lastRev {
			t.Fatalf("cycle %d: revision ran backwards across the %s cut: %d -> %d", cycle, kind, lastRev, rev)
		}
		lastRev = rev
		for _, z := range []testutil.Zone{testutil.ZoneA, testutil.ZoneB} {
			got := pairKeys(t, p, z, rev)
			for _, a := range acked.all() {
				r, ok := got[a.key]
				if !ok {
					t.Fatalf("cycle %d (%s cut, %s): acknowledged write %s (rev %d) lost on node %v", cycle, kind, trig.name, a.key, a.rev, z)
				}
				if r != a.rev {
					t.Fatalf("cycle %d (%s cut): %s acknowledged at rev %d, found at rev %d on node %v", cycle, kind, a.key, a.rev, r, z)
				}
			}
			for r, h := range checkpoints {
				if got := p.Hash(z, r); got != h {
					t.Fatalf("cycle %d (%s cut): HashKV at rev %d changed on node %v: %x -> %x", cycle, kind, r, z, h, got)
				}
			}
		}
		checkpoints[rev] = p.Hash(leader, rev)
		t.Logf("cycle %d (%s cut, %s): pair formed again, %v leads; %d acknowledged writes on both nodes, revision %d",
			cycle, kind, trig.name, leader, acked.len(), rev)
	}
	t.Logf("FIGURES pair power cuts %d (node cuts %d, torn %d; found unsynced changes %d, rolled something back %d), failovers %d, "+
		"acknowledged writes checked on both nodes %d, lost 0, HashKV checkpoints %d",
		stats.cuts, stats.nodeCuts, stats.torn, stats.hit, stats.rolledBack, stats.failovers, acked.len(), len(checkpoints))
	if acked.len() < 100 {
		t.Fatalf("only %d writes acknowledged: the test did not exercise the write path", acked.len())
	}
	if need := stats.cuts/2 + 1; stats.hit < need {
		t.Fatalf("only %d of %d node cuts found unsynced changes (need %d of %d cycles): the cuts missed the unsynced data",
			stats.hit, stats.nodeCuts, need, stats.cuts)
	}
}

// pairKeys reads every ppc/ key of node z with its modification revision,
// serializably: Converged has made sure z applied everything up to rev.
func pairKeys(t *testing.T, p *testutil.Pair, z testutil.Zone, rev int64) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := p.Client(z).Get(ctx, "ppc/", clientv3.WithPrefix(), clientv3.WithSerializable(), clientv3.WithRev(rev))
	if err != nil {
		t.Fatalf("read of node %v at rev %d: %v", z, rev, err)
	}
	got := make(map[string]int64, len(all.Kvs))
	for _, kv := range all.Kvs {
		if string(kv.Value) != string(kv.Key) {
			t.Fatalf("node %v: %s holds %q", z, kv.Key, kv.Value)
		}
		got[string(kv.Key)] = kv.ModRevision
	}
	return got
}

// waitFor polls cond every 20 ms until it holds (true) or within has
// passed (false).
func waitFor(within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}
