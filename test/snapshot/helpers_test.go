package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/test/testutil"
)

func init() {
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
}

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// ---- running the CLI tools --------------------------------------------------

type cmdResult struct {
	stdout, stderr string
	err            error
}

func (r cmdResult) String() string {
	return fmt.Sprintf("exit: %v\n--- stdout ---\n%s\n--- stderr ---\n%s", r.err, r.stdout, tail(r.stderr, 4000))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

// run executes bin with args and a timeout, in dir (if not empty).
func run(t *testing.T, bin string, args ...string) cmdResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	t.Logf("ran %s %s: %v", filepath.Base(bin), strings.Join(quoteArgs(args), " "), errOrOK(err))
	return cmdResult{out.String(), errb.String(), err}
}

func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if strings.ContainsAny(a, " \t\"'") {
			a = fmt.Sprintf("%q", a)
		}
		out[i] = a
	}
	return out
}

func errOrOK(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// mustRun is run that fails the test on a non-zero exit.
func mustRun(t *testing.T, bin string, args ...string) cmdResult {
	t.Helper()
	r := run(t, bin, args...)
	if r.err != nil {
		t.Fatalf("%s %s failed:\n%s", filepath.Base(bin), strings.Join(args, " "), r)
	}
	return r
}

// saveSnapshot runs `<etcdctl> snapshot save` against s into dir and returns
// the file's path.
func saveSnapshot(t *testing.T, etcdctl string, s *testutil.Server, dir, name string) string {
	t.Helper()
	bin := testutil.RequireBinary(t, etcdctl)
	path := filepath.Join(dir, name)
	mustRun(t, bin, "--endpoints", s.HostPort(), "snapshot", "save", path)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatalf("snapshot file: %v", err)
	}
	t.Logf("%s snapshot save from %s (%s): %d bytes", etcdctl, s.Kind(), filepath.Base(s.Binary()), st.Size())
	return path
}

// snapStatus is `etcdutl snapshot status -w json`.
type snapStatus struct {
	Hash      uint32 `json:"hash"`
	Revision  int64  `json:"revision"`
	TotalKey  int    `json:"totalKey"`
	TotalSize int64  `json:"totalSize"`
	Version   string `json:"version"`
}

func snapshotStatus(t *testing.T, etcdutl, path string) snapStatus {
	t.Helper()
	bin := testutil.RequireBinary(t, etcdutl)
	r := mustRun(t, bin, "snapshot", "status", path, "-w", "json")
	var st snapStatus
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &st); err != nil {
		t.Fatalf("%s snapshot status output %q: %v", etcdutl, r.stdout, err)
	}
	return st
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// ---- the history every direction writes ---------------------------------

const (
	leaseWithKeys = 0x1234 // l1, l2 attached
	leaseNoKeys   = 0x9abc // granted, never used
	leaseTTL      = 3600
	leaseNoKeyTTL = 1800
)

// history describes what writeHistory did.
type history struct {
	name       string
	compactRev int64 // last physical compaction
	rev        int64 // current revision afterwards
}

var (
	// standard: puts, overwrites, a delete, two leases (one with keys), a
	// multi-op txn, a physical compaction in the middle, binary keys, a
	// 100 KiB value, a delete after the compaction; ends with a put.
	standard = history{name: "standard", compactRev: 7, rev: 14}
	// endsCompactedDelete: standard, then a delete compacted at exactly its
	// revision (the tombstone sits at the compaction revision; etcd >= 3.5.16
	// keeps it in the key bucket).
	endsCompactedDelete = history{name: "ends-with-compacted-delete", compactRev: 15, rev: 15}
)

var bigValue = strings.Repeat("0123456789abcdef", 100<<10/16)

// writeHistory applies h to a fresh server (current revision 1) and checks
// each write landed at the revision h expects.
func writeHistory(t *testing.T, cli *clientv3.Client, h history) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := int64(1)
	check := func(what string, rev int64, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("history %s: %s: %v", h.name, what, err)
		}
		want++
		if rev != want {
			t.Fatalf("history %s: %s landed at revision %d, want %d", h.name, what, rev, want)
		}
	}
	put := func(k, v string, opts ...clientv3.OpOption) {
		t.Helper()
		r, err := cli.Put(ctx, k, v, opts...)
		if err != nil {
			check("put "+k, 0, err)
		}
		check("put "+k, r.Header.Revision, nil)
	}
	del := func(k string) {
		t.Helper()
		r, err := cli.Delete(ctx, k)
		if err != nil {
			check("delete "+k, 0, err)
		}
		check("delete "+k, r.Header.Revision, nil)
	}
	compact := func(rev int64) {
		t.Helper()
		if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
			t.Fatalf("history %s: compact %d: %v", h.name, rev, err)
		}
	}
	leases := pb.NewLeaseClient(cli.ActiveConnection())
	grant := func(id, ttl int64) {
		t.Helper()
		if _, err := leases.LeaseGrant(ctx, &pb.LeaseGrantRequest{ID: id, TTL: ttl}); err != nil {
			t.Fatalf("history %s: grant lease %#x: %v", h.name, id, err)
		}
	}

	put("a", "1")  // 2
	put("b", "2")  // 3
	put("c", "3")  // 4
	put("a", "11") // 5
	del("b")       // 6
	grant(leaseWithKeys, leaseTTL)
	grant(leaseNoKeys, leaseNoKeyTTL)
	put("l1", "x", clientv3.WithLease(leaseWithKeys)) // 7
	put("l2", "y", clientv3.WithLease(leaseWithKeys)) // 8
	// 9: one txn of three writes.
	tr, err := cli.Txn(ctx).Then(
		clientv3.OpPut("t1", "1"), clientv3.OpPut("t2", "2"), clientv3.OpDelete("c"),
	).Commit()
	if err != nil {
		check("txn", 0, err)
	}
	check("txn", tr.Header.Revision, nil)
	compact(7)
	put("a", "111")            // 10
	put("\x00bin\xff", "\x01") // 11
	put("big", bigValue)       // 12
	del("t2")                  // 13
	put("e", "5")              // 14
	if h.name == endsCompactedDelete.name {
		del("e")    // 15
		compact(15) // at the tombstone
	}
	if want != h.rev {
		t.Fatalf("history %s ended at revision %d, want %d", h.name, want, h.rev)
	}
}

// ---- what a server serves ----------------------------------------------

type kvState struct {
	Key            string
	Value          string
	CreateRevision int64
	ModRevision    int64
	Version        int64
	Lease          int64
}

func (k kvState) String() string {
	v := k.Value
	if len(v) > 40 {
		v = fmt.Sprintf("%s...(%d bytes)", v[:16], len(v))
	}
	return fmt.Sprintf("%q=%q create=%d mod=%d ver=%d lease=%#x", k.Key, v, k.CreateRevision, k.ModRevision, k.Version, k.Lease)
}

type leaseState struct {
	ID         int64
	GrantedTTL int64
	Keys       []string
}

// state is everything compared between the source and the destination of a
// snapshot.
type state struct {
	Rev          int64
	KVs          []kvState
	History      map[int64][]kvState // every key at each revision compactRev..Rev
	BelowCompact string              // the answer to a read at compactRev-1
	Leases       []leaseState
}

func kvsOf(r *clientv3.GetResponse) []kvState {
	out := make([]kvState, 0, len(r.Kvs))
	for _, kv := range r.Kvs {
		out = append(out, kvState{string(kv.Key), string(kv.Value), kv.CreateRevision, kv.ModRevision, kv.Version, kv.Lease})
	}
	return out
}

func errString(err error) string {
	if st, ok := status.FromError(err); ok {
		return fmt.Sprintf("code=%s desc=%q", st.Code(), st.Message())
	}
	return err.Error()
}

// capture reads the state of s: all keys, every revision since the
// compaction, the compaction boundary and the leases.
func capture(t *testing.T, cli *clientv3.Client, compactRev int64) state {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	all, err := cli.Get(ctx, "\x00", clientv3.WithFromKey())
	if err != nil {
		t.Fatalf("get all: %v", err)
	}
	st := state{Rev: all.Header.Revision, KVs: kvsOf(all), History: map[int64][]kvState{}}
	for rev := compactRev; rev <= st.Rev; rev++ {
		r, err := cli.Get(ctx, "\x00", clientv3.WithFromKey(), clientv3.WithRev(rev))
		if err != nil {
			t.Fatalf("get all at revision %d (compacted at %d): %v", rev, compactRev, err)
		}
		st.History[rev] = kvsOf(r)
	}
	if _, err := cli.Get(ctx, "a", clientv3.WithRev(compactRev-1)); err != nil {
		st.BelowCompact = errString(err)
	} else {
		st.BelowCompact = "no error"
	}
	ls, err := cli.Leases(ctx)
	if err != nil {
		t.Fatalf("leases: %v", err)
	}
	for _, l := range ls.Leases {
		ttl, err := cli.TimeToLive(ctx, l.ID, clientv3.WithAttachedKeys())
		if err != nil {
			t.Fatalf("time to live %#x: %v", l.ID, err)
		}
		ks := []string{}
		for _, k := range ttl.Keys {
			ks = append(ks, string(k))
		}
		sort.Strings(ks)
		st.Leases = append(st.Leases, leaseState{ID: int64(l.ID), GrantedTTL: ttl.GrantedTTL, Keys: ks})
	}
	sort.Slice(st.Leases, func(i, j int) bool { return st.Leases[i].ID < st.Leases[j].ID })
	return st
}

// compareStates reports every difference between what want and got serve.
func compareStates(t *testing.T, wantLabel string, want state, gotLabel string, got state) {
	t.Helper()
	if want.Rev != got.Rev {
		t.Errorf("current revision: %s %d, %s %d", wantLabel, want.Rev, gotLabel, got.Rev)
	}
	diffKVs(t, "all keys (latest)", wantLabel, want.KVs, gotLabel, got.KVs)
	revs := map[int64]bool{}
	for r := range want.History {
		revs[r] = true
	}
	for r := range got.History {
		revs[r] = true
	}
	var sorted []int64
	for r := range revs {
		sorted = append(sorted, r)
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	for _, r := range sorted {
		diffKVs(t, fmt.Sprintf("all keys at revision %d", r), wantLabel, want.History[r], gotLabel, got.History[r])
	}
	if want.BelowCompact != got.BelowCompact {
		t.Errorf("read below the compaction revision: %s %s, %s %s", wantLabel, want.BelowCompact, gotLabel, got.BelowCompact)
	}
	if fmt.Sprint(want.Leases) != fmt.Sprint(got.Leases) {
		t.Errorf("leases (ID, granted TTL, keys):\n  %s %+v\n  %s %+v", wantLabel, want.Leases, gotLabel, got.Leases)
	}
}

func diffKVs(t *testing.T, what, wantLabel string, want []kvState, gotLabel string, got []kvState) {
	t.Helper()
	if fmt.Sprint(want) == fmt.Sprint(got) {
		return
	}
	var b strings.Builder
	for i := 0; i < max(len(want), len(got)); i++ {
		var w, g string
		if i < len(want) {
			w = want[i].String()
		}
		if i < len(got) {
			g = got[i].String()
		}
		mark := " "
		if w != g {
			mark = "!"
		}
		fmt.Fprintf(&b, "  %s %-8s %s\n  %s %-8s %s\n", mark, wantLabel, w, mark, gotLabel, g)
	}
	t.Errorf("%s differ:\n%s", what, b.String())
}

// continueWrites checks the destination keeps going from where the source
// stopped: the next write gets revision src.Rev+1, and revoking the lease
// with keys deletes them in one more revision (so the lease-key attachment
// survived).
func continueWrites(t *testing.T, cli *clientv3.Client, src state) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := cli.Put(ctx, "after-restore", "v")
	if err != nil {
		t.Fatalf("put after restore: %v", err)
	}
	if r.Header.Revision != src.Rev+1 {
		t.Errorf("first write after restore got revision %d, want %d", r.Header.Revision, src.Rev+1)
	}
	g, err := cli.Get(ctx, "after-restore")
	if err != nil || len(g.Kvs) != 1 || g.Kvs[0].CreateRevision != src.Rev+1 || g.Kvs[0].Version != 1 {
		t.Errorf("get after-restore = %v, %v; want create_revision %d version 1", g, err, src.Rev+1)
	}
	ka, err := cli.KeepAliveOnce(ctx, leaseWithKeys)
	if err != nil {
		t.Errorf("keep-alive of lease %#x after restore: %v", leaseWithKeys, err)
	} else if ka.TTL != leaseTTL {
		t.Errorf("keep-alive of lease %#x after restore: TTL %d, want %d", leaseWithKeys, ka.TTL, leaseTTL)
	}
	rv, err := cli.Revoke(ctx, leaseWithKeys)
	if err != nil {
		t.Fatalf("revoke lease %#x after restore: %v", leaseWithKeys, err)
	}
	if rv.Header.Revision != src.Rev+2 {
		t.Errorf("revoking lease %#x (keys l1, l2) after restore: header revision %d, want %d", leaseWithKeys, rv.Header.Revision, src.Rev+2)
	}
	left, err := cli.Get(ctx, "l", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Kvs) != 0 {
		t.Errorf("keys of revoked lease %#x still present: %v", leaseWithKeys, kvsOf(left))
	}
	// Both deletions are one revision.
	w, err := cli.Get(ctx, "l", clientv3.WithPrefix(), clientv3.WithRev(src.Rev+1))
	if err != nil || len(w.Kvs) != 2 {
		t.Errorf("at revision %d l1, l2 should still exist: %v, %v", src.Rev+1, w, err)
	}
}

// ---- servers ----------------------------------------------------------------

// EnvSubject replaces dyad as the source of TestSaveFromDyad and
// TestRollback by an etcd binary (e.g. "etcd-3.6"), to check those tests
// against a real etcd. `dyad snapshot restore` is always dyad's.
const EnvSubject = "DYAD_SNAPSHOT_TARGET"

func subject() string { return testutil.TargetFromEnv(EnvSubject) }

// startSource starts a fresh server of target and writes h into it.
func startSource(t *testing.T, target string, h history) (*testutil.Server, *clientv3.Client, state) {
	t.Helper()
	s := testutil.Start(t, target)
	cli := s.Client(t)
	writeHistory(t, cli, h)
	return s, cli, capture(t, cli, h.compactRev)
}

// dyadRestore runs `dyad snapshot restore`.
func dyadRestore(t *testing.T, snap, dataDir string) cmdResult {
	t.Helper()
	return run(t, testutil.BuildDyad(t), "snapshot", "restore", snap, "--data-dir", dataDir)
}

// etcdutlRestore restores snap into dataDir for member n1 advertising
// peerURL, the way an operator rolls back to etcd.
func etcdutlRestore(t *testing.T, etcdutl, snap, dataDir, peerURL string) {
	t.Helper()
	bin := testutil.RequireBinary(t, etcdutl)
	mustRun(t, bin, "snapshot", "restore", snap,
		"--data-dir", dataDir,
		"--name", "n1",
		"--initial-cluster", "n1="+peerURL,
		"--initial-advertise-peer-urls", peerURL)
}

// startRestoredEtcd starts etcd on a data dir made by etcdutlRestore, with
// the same name, initial cluster and peer URL (which it also listens on).
func startRestoredEtcd(t *testing.T, etcd, dataDir, peerURL string) *testutil.Server {
	t.Helper()
	return testutil.StartEtcd(t, etcd,
		testutil.WithName("n1"),
		testutil.WithDataDir(dataDir),
		testutil.WithArgs(
			"--initial-cluster", "n1="+peerURL,
			"--initial-advertise-peer-urls", peerURL,
			"--listen-peer-urls", peerURL,
		))
}

func notExist(path string) bool {
	_, err := os.Stat(path)
	return errors.Is(err, os.ErrNotExist)
}
