package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/conflict"
	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// splitPair starts a pair (A preferred), cuts it in two and waits until
// both sides lead alone.
func splitPair(t *testing.T, manual bool) (net *transport.MemNet, a, b *node, dirB string) {
	net = transport.NewMemNet()
	dirA, dirB := t.TempDir(), t.TempDir()
	edit := func(c *server.ReplConfig) { c.ManualSplitBrain = manual }
	a = pairNodeWith(t, net, dirA, 1, true, edit)
	b = pairNodeWith(t, net, dirB, 2, false, edit)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	put(t, a.cli, "shared", "before")
	net.Partition(1, 2, true)
	waitRole(t, a, repl.RoleSolo)
	waitRole(t, b, repl.RoleSolo)
	return net, a, b, dirB
}

// cancelledAsCompacted waits for a watch to end with a compaction.
func cancelledAsCompacted(t *testing.T, name string, wch clientv3.WatchChan) {
	t.Helper()
	deadline := time.After(40 * testLease)
	for {
		select {
		case wr, ok := <-wch:
			if !ok {
				t.Fatalf("%s: watch closed without a compaction", name)
			}
			if wr.CompactRevision != 0 {
				return
			}
		case <-deadline:
			t.Fatalf("%s: watch was not cancelled as compacted after the merge", name)
		}
	}
}

// onlySet waits for the one conflict set of the node at dir.
func onlySet(t *testing.T, dir string) *conflict.Set {
	t.Helper()
	deadline := time.Now().Add(20 * testLease)
	paths, err := conflict.List(conflict.Dir(dir))
	for err == nil && len(paths) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		paths, err = conflict.List(conflict.Dir(dir))
	}
	if err != nil || len(paths) != 1 {
		t.Fatalf("conflict sets: %v %v, want one", paths, err)
	}
	s, err := conflict.Load(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Both sides acknowledge writes while apart. On reconnect the preferred
// zone's history wins; the other side's diverged writes are kept as
// conflict records, not merged; revisions jump above both sides'; every
// watch on both nodes ends as compacted; the pair converges.
func TestSplitBrainPreferredWins(t *testing.T) {
	net, a, b, dirB := splitPair(t, false)
	revA := put(t, a.cli, "a-only", "1")
	put(t, b.cli, "b-only", "2")
	put(t, b.cli, "shared", "b-side")
	revB := put(t, b.cli, "b-late", "3")
	put(t, b.cli, "b-late", "4") // the final state is what the records keep
	_, revB = get(t, b.cli, "b-late")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wa := a.cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(revA+1))
	wb := b.cli.Watch(ctx, "", clientv3.WithPrefix(), clientv3.WithRev(revB+1))

	net.Partition(1, 2, false)
	waitRole(t, b, repl.RoleReplica)
	waitRole(t, a, repl.RolePrimary)
	cancelledAsCompacted(t, "watch on the winner", wa)
	cancelledAsCompacted(t, "watch on the loser", wb)

	r := put(t, a.cli, "after", "5")
	if r <= revA || r <= revB+1 {
		t.Fatalf("first revision after the merge %d is not above both sides' (%d, %d)", r, revA, revB)
	}
	for _, n := range []*node{a, b} {
		if v, _ := get(t, n.cli, "a-only"); v != "1" {
			t.Fatalf("%s: the winner's write is missing: %q", n.cfg.Name, v)
		}
		if v, _ := get(t, n.cli, "b-only"); v != "" {
			t.Fatalf("%s: the loser's diverged write was merged: %q", n.cfg.Name, v)
		}
		if v, _ := get(t, n.cli, "shared"); v != "before" {
			t.Fatalf("%s: shared key %q, want the winner's", n.cfg.Name, v)
		}
	}
	if hashAt(t, a, r) != hashAt(t, b, r) {
		t.Fatal("HashKV differs after the merge")
	}
	s := onlySet(t, dirB)
	want := map[string]string{"b-only": "2", "shared": "b-side", "b-late": "4"}
	got := map[string]string{}
	for _, k := range s.Keys {
		got[string(k.Key)] = string(k.Value)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("conflict record of %s = %q, want %q (records %v)", k, got[k], v, got)
		}
	}
	if len(s.Entries) < 4 || s.Incomplete != "" {
		t.Errorf("conflict set lists %d entries (incomplete %q), want the 4 diverged puts", len(s.Entries), s.Incomplete)
	}
}

// Only the non-preferred side acknowledged writes while apart: nothing
// conflicts, so the preferred side yields and catches up, and no conflict
// record is written.
func TestSplitOneSideWrote(t *testing.T) {
	net, a, b, dirB := splitPair(t, false)
	put(t, b.cli, "b-only", "2")
	net.Partition(1, 2, false)
	waitRole(t, a, repl.RoleReplica)
	waitRole(t, b, repl.RolePrimary)
	if v, _ := get(t, a.cli, "b-only"); v != "2" {
		t.Fatalf("the side that wrote nothing did not catch up: %q", v)
	}
	if paths, _ := conflict.List(conflict.Dir(dirB)); len(paths) != 0 {
		t.Fatalf("conflict records without a conflict: %v", paths)
	}
}

// With the manual policy the loser stops serving until the operator
// accepts; then it rejoins, and its records stay.
func TestSplitBrainManual(t *testing.T) {
	net, a, b, dirB := splitPair(t, true)
	put(t, a.cli, "a-only", "1")
	put(t, b.cli, "b-only", "2")
	hbs := heartbeatLog(t, net, 2)
	net.Partition(1, 2, false)
	s := onlySet(t, dirB)
	hbs.holds(t, repl.RoleWaiting, 5*testLease)
	if r := b.srv.Role(); r != repl.RoleWaiting {
		t.Fatalf("the loser under the manual policy is %s before acceptance", r)
	}
	st, err := b.cli.Status(context.Background(), b.cli.Endpoints()[0])
	if err != nil || len(st.Errors) != 1 || !strings.Contains(st.Errors[0], "dyad resolve accept") {
		t.Fatalf("Status of the held-back loser does not say why it waits: %v %v", st, err)
	}
	g, err := b.cli.Get(context.Background(), "b-only", clientv3.WithSerializable())
	if err != nil || len(g.Kvs) != 1 || string(g.Kvs[0].Value) != "2" {
		t.Fatalf("the held-back loser lost its own data before acceptance: %+v %v", g, err)
	}
	paths, _ := conflict.List(conflict.Dir(dirB))
	if err := conflict.Accept(paths[0]); err != nil {
		t.Fatal(err)
	}
	waitRole(t, b, repl.RoleReplica)
	waitRole(t, a, repl.RolePrimary)
	if st, err := b.cli.Status(context.Background(), b.cli.Endpoints()[0]); err != nil || len(st.Errors) != 0 {
		t.Fatalf("Status after acceptance: %v %v", st, err)
	}
	if v, _ := get(t, b.cli, "a-only"); v != "1" {
		t.Fatalf("accepted loser did not resync: %q", v)
	}
	if len(s.Keys) != 1 || string(s.Keys[0].Key) != "b-only" {
		t.Fatalf("conflict keys %+v, want b-only", s.Keys)
	}
}
