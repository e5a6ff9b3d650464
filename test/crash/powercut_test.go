package crash

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
	"github.com/dyad-db/dyad/test/testutil/powerfs"
)

// Environment of TestPowerCut (CI uses the defaults; the long run is
// DYAD_POWERCUT_CYCLES=200 go test -run TestPowerCut -timeout 60m ./test/crash).
const (
	envCycles = "DYAD_POWERCUT_CYCLES" // power cuts per run (default 8)
	envSeed   = "DYAD_POWERCUT_SEED"   // random seed (default: the time)
)

func envInt(name string, def int64) int64 {
	if v, err := strconv.ParseInt(os.Getenv(name), 10, 64); err == nil {
		return v
	}
	return def
}

// powerCutTrigger is how one cycle's power cut is chosen. Every kind aims
// at a moment when the file system holds unsynced data, so that the cut
// has something to roll back or tear: a cut between two group commits
// (everything synced) would test nothing.
type powerCutTrigger struct {
	name  string
	arm   powerfs.Trigger
	delay time.Duration // for a timed cut: then cut just after the next write
}

func pickTrigger(rng *rand.Rand, cycle int) powerCutTrigger {
	switch cycle % 3 {
	case 0:
		return powerCutTrigger{name: "timed", delay: time.Duration(100+rng.Intn(700)) * time.Millisecond}
	case 1:
		// Just after a write, before the fsync that would make it
		// durable: the commit in flight is not acknowledged yet.
		n := 1 + rng.Intn(300)
		return powerCutTrigger{name: fmt.Sprintf("after-write-%d", n), arm: powerfs.Trigger{AfterWrite: n}}
	default:
		// Instead of a write that follows other unsynced writes:
		// mid-commit, the pages of a bbolt transaction half written.
		n := 1 + rng.Intn(300)
		return powerCutTrigger{name: fmt.Sprintf("mid-commit-%d", n), arm: powerfs.Trigger{AtWrite: n, Unsynced: true}}
	}
}

// hit reports whether a crash found unsynced changes: sectors of file data
// rolled back, or kept by a torn crash, or directory operations undone.
func hit(rep powerfs.Report) bool {
	return rep.SectorsLost > 0 || rep.SectorsKept > 0 || rep.DirOpsUndone > 0
}

// rolledBack reports whether a crash undid anything.
func rolledBack(rep powerfs.Report) bool { return rep.SectorsLost > 0 || rep.DirOpsUndone > 0 }

// cutCounts tallies what the crashes after power cuts found.
type cutCounts struct{ torn, hit, rolledBack int }

func (c *cutCounts) add(mode powerfs.Mode, rep powerfs.Report) {
	if mode == powerfs.Torn {
		c.torn++
	}
	if hit(rep) {
		c.hit++
	}
	if rolledBack(rep) {
		c.rolledBack++
	}
}

// journalBound is TestPowerCut's journal bound (bytes).
const journalBound = 64 << 10

// rng2 is a cheap per-cycle jitter for the maintenance loop, which runs
// beside the test goroutine and so must not share its rand.Rand.
func rng2(cycle int) int { return (cycle * 37) % 200 }

// TestPowerCut runs dyad on powerfs and cuts the power again and again
// while 8 clients write and the data file is defragmented over and over,
// each time while unsynced data is held: just after the first write that
// follows a random delay, just after a random write, or instead of a
// random write in the middle of a commit (counting only writes that change
// the file). Unsynced data is then rolled back, all of it or a torn subset
// of sectors, and dyad restarts on what a rebooted machine would find.
// Else the test would exercise nothing, so every cut whose trigger fired
// must find unsynced changes (and roll them back, in a clean crash; a torn
// one may keep them all), and more than half of all the cuts must find
// some, whether their trigger fired in time or not. The node switches to
// a new journal every 64 KiB of entries, so cuts find that switch too.
// After each restart:
//   - every acknowledged write is there at the revision it was
//     acknowledged at (none lost);
//   - the revision never runs backwards;
//   - the hash of the history up to each earlier checkpoint revision
//     (HashKV) is unchanged: no crash rewrites durable history.
func TestPowerCut(t *testing.T) {
	powerfs.Need(t)
	cycles := int(envInt(envCycles, 8))
	seed := envInt(envSeed, time.Now().UnixNano())
	t.Logf("%s=%d %s=%d", envCycles, cycles, envSeed, seed)
	rng := rand.New(rand.NewSource(seed))

	base := t.TempDir()
	disk, mnt := filepath.Join(base, "disk"), filepath.Join(base, "mnt")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	pfs, err := powerfs.Mount(disk, mnt)
	if err != nil {
		t.Fatal(err)
	}
	// Registered before the server's own cleanup, so it runs after the
	// server is dead; and after TempDir, so it runs before the removal.
	t.Cleanup(func() { pfs.Close() })
	// A journal bound of 64 KiB (against 64 MiB) has the node commit the
	// data file and start a new journal, moving the old one aside, every
	// few hundred writes: cuts land in that switch too.
	srv := testutil.StartDyad(t, testutil.WithDataDir(filepath.Join(mnt, "data")),
		testutil.WithArgs("--experimental-journal-max-bytes", strconv.Itoa(journalBound)))

	var acked acks
	checkpoints := map[int64]uint32{} // revision -> HashKV
	var lastRev int64
	defrags := 0
	var stats struct {
		cutCounts
		cuts, restarts, dirOps, files, sectorsLost, sectorsKept int
	}
	for cycle := 0; cycle < cycles; cycle++ {
		trig := pickTrigger(rng, cycle)
		mode := powerfs.Clean
		if rng.Intn(2) == 0 {
			mode = powerfs.Torn
		}
		cli, err := clientv3.New(srv.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		ctx, cancel := context.WithCancel(context.Background())
		pfs.Arm(trig.arm)
		// A put the cut fails has an unknown outcome: its writer stops.
		waitWriters := writeUntil(ctx, cli, 8, func(w, i int) string { return fmt.Sprintf("pc/%03d/w%d/%06d", cycle, w, i) }, &acked, false)
		tStart := time.Now()
		// Maintenance in the same window: defragmentation replaces the
		// data file (a new file, a rename, a directory fsync), so a cut
		// can land anywhere in that sequence too.
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(50+rng2(cycle)) * time.Millisecond):
				}
				c, cc := context.WithTimeout(ctx, 5*time.Second)
				if _, err := cli.Defragment(c, srv.Endpoint()); err == nil {
					mu.Lock()
					defrags++
					mu.Unlock()
				}
				cc()
			}
		}()
		if trig.delay > 0 {
			<-time.After(trig.delay) // a random moment into the writes
			pfs.Arm(powerfs.Trigger{AfterWrite: 1})
		}
		// A trigger not reached in time (the writers stalled) falls
		// back to a cut at once, which may find nothing unsynced; the
		// bite count below tells.
		fellBack := false
		select {
		case <-pfs.CutC():
		case <-time.After(5 * time.Second):
			fellBack = true
		}
		pfs.Cut()
		tCut := time.Now()
		t.Logf("cycle %d: cut after %v (trigger reached: %v)", cycle, tCut.Sub(tStart), !fellBack)
		srv.Kill()
		tKill := time.Now()
		cancel()
		wg.Wait()
		waitWriters()
		cli.Close()
		rep, err := pfs.Crash(mode, rng)
		if err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
		tCrash := time.Now()
		stats.cuts++
		stats.add(mode, rep)
		switch {
		case fellBack:
		case !hit(rep):
			t.Fatalf("cycle %d (%s, %s): the cut found nothing unsynced (%+v)", cycle, trig.name, mode, rep)
		case mode == powerfs.Clean && !rolledBack(rep):
			t.Fatalf("cycle %d (%s, clean): the crash rolled nothing back (%+v)", cycle, trig.name, rep)
		}
		stats.dirOps += rep.DirOpsUndone
		stats.files += rep.FilesReverted
		stats.sectorsLost += rep.SectorsLost
		stats.sectorsKept += rep.SectorsKept
		if pfs, err = powerfs.Mount(disk, mnt); err != nil {
			t.Fatal(err)
		}
		if err := srv.Restart(); err != nil {
			t.Fatalf("cycle %d (%s, %s): restart after the power cut: %v\n%s", cycle, trig.name, mode, err, srv.LogTail())
		}
		stats.restarts++
		t.Logf("cycle %d: kill %v, crash %v, restart %v", cycle, tKill.Sub(tCut), tCrash.Sub(tKill), time.Since(tCrash))

		cli = srv.Client(t)
		c, cc := context.WithTimeout(context.Background(), 30*time.Second)
		all, err := cli.Get(c, "pc/", clientv3.WithPrefix())
		cc()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, kv := range all.Kvs {
			if string(kv.Value) != string(kv.Key) {
				t.Fatalf("cycle %d: %s holds %q", cycle, kv.Key, kv.Value)
			}
			got[string(kv.Key)] = kv.ModRevision
		}
		for _, a := range acked.all() {
			rev, ok := got[a.key]
			if !ok {
				t.Fatalf("cycle %d (%s, %s): acknowledged write %s (rev %d) lost", cycle, trig.name, mode, a.key, a.rev)
			}
			if rev != a.rev {
				t.Fatalf("cycle %d: %s acknowledged at rev %d, found at rev %d", cycle, a.key, a.rev, rev)
			}
		}
		rev := all.Header.Revision
		if rev < lastRev {
			t.Fatalf("cycle %d: revision ran backwards across the power cut: %d -> %d", cycle, lastRev, rev)
		}
		lastRev = rev
		for r, h := range checkpoints {
			c, cc := context.WithTimeout(context.Background(), 10*time.Second)
			hk, err := cli.HashKV(c, srv.Endpoint(), r)
			cc()
			if err != nil {
				t.Fatal(err)
			}
			if hk.Hash != h {
				t.Fatalf("cycle %d: HashKV at rev %d changed across the power cut: %x -> %x", cycle, r, h, hk.Hash)
			}
		}
		c, cc = context.WithTimeout(context.Background(), 10*time.Second)
		hk, err := cli.HashKV(c, srv.Endpoint(), rev)
		cc()
		if err != nil {
			t.Fatal(err)
		}
		checkpoints[rev] = hk.Hash
		t.Logf("cycle %d (%s, %s): %d acknowledged writes all present, revision %d; rolled back: "+
			"files %d, sectors lost %d / kept %d, dir ops %d",
			cycle, trig.name, mode, acked.len(), rev, rep.FilesReverted, rep.SectorsLost, rep.SectorsKept,
			rep.DirOpsUndone)
	}
	t.Logf("FIGURES power cuts %d (torn %d; found unsynced changes %d, rolled something back %d), restarts %d, acknowledged writes checked %d, lost 0, "+
		"HashKV checkpoints %d, defrags %d; rolled back: dir ops %d, files %d, sectors lost %d / kept %d",
		stats.cuts, stats.torn, stats.hit, stats.rolledBack, stats.restarts, acked.len(), len(checkpoints), defrags, stats.dirOps,
		stats.files, stats.sectorsLost, stats.sectorsKept)
	if acked.len() < 100 {
		t.Fatalf("only %d writes acknowledged: the test did not exercise the write path", acked.len())
	}
	// Cuts whose trigger fired were checked above; this bounds the ones
	// that fell back to a cut at an arbitrary moment.
	if need := stats.cuts/2 + 1; stats.hit < need {
		t.Fatalf("only %d of %d power cuts found unsynced changes (need %d): the cuts missed the unsynced data",
			stats.hit, stats.cuts, need)
	}
}
