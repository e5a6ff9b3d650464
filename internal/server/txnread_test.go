package server_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/server"
)

// A GuaranteedUpdate whose compare fails (If ModRevision(k) == stale, Then
// Put, Else Get) writes nothing: on either node of a pair it is answered
// as a linearizable read, with no log entry, and its Else branch shows the
// newest acknowledged value; so is a read-only txn. Its compare holding,
// or a failure branch that writes, still goes through the log.
func TestTxnThatCannotWriteIsAReadOnBothNodes(t *testing.T) {
	a, b := newPair(t)
	waitLease(t, b)
	c := ctx(t)
	put, err := a.cli.Put(c, "pod", "v1")
	if err != nil {
		t.Fatal(err)
	}
	modRev := put.Header.Revision
	update := func(cli *clientv3.Client, seen int64, val string) *clientv3.TxnResponse {
		t.Helper()
		r, err := cli.Txn(c).If(clientv3.Compare(clientv3.ModRevision("pod"), "=", seen)).
			Then(clientv3.OpPut("pod", val)).Else(clientv3.OpGet("pod")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	for _, n := range []*node{a, b} {
		before := server.AppliedIndex(a.srv)
		r := update(n.cli, modRev-1, "stale")
		if r.Succeeded {
			t.Fatalf("%s: a compare against a stale revision succeeded", n.cfg.Name)
		}
		kvs := r.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) != 1 || string(kvs[0].Value) != "v1" || kvs[0].ModRevision != modRev {
			t.Fatalf("%s: Else read %v, want pod=v1 at %d", n.cfg.Name, kvs, modRev)
		}
		if r.Header.Revision < modRev {
			t.Fatalf("%s: header revision %d below the acknowledged write's %d", n.cfg.Name, r.Header.Revision, modRev)
		}
		// A read-only txn whose compare holds: its Then branch, unlogged.
		ro, err := n.cli.Txn(c).If(clientv3.Compare(clientv3.ModRevision("pod"), "=", modRev)).
			Then(clientv3.OpGet("pod")).Else(clientv3.OpGet("missing")).Commit()
		if err != nil {
			t.Fatal(err)
		}
		if kvs := ro.Responses[0].GetResponseRange().GetKvs(); !ro.Succeeded || len(kvs) != 1 || string(kvs[0].Value) != "v1" {
			t.Fatalf("%s: read-only txn succeeded %v, read %v, want pod=v1", n.cfg.Name, ro.Succeeded, kvs)
		}
		if after := server.AppliedIndex(a.srv); after != before {
			t.Fatalf("%s: a txn that wrote nothing was logged (primary applied %d -> %d)", n.cfg.Name, before, after)
		}
	}
	// The compare holds: the put is logged and applied.
	before := server.AppliedIndex(a.srv)
	r := update(b.cli, modRev, "v2")
	if !r.Succeeded || server.AppliedIndex(a.srv) == before {
		t.Fatalf("a txn whose compare holds was not logged (succeeded %v)", r.Succeeded)
	}
	// A failure branch that writes is logged too.
	before = server.AppliedIndex(a.srv)
	w, err := a.cli.Txn(c).If(clientv3.Compare(clientv3.ModRevision("pod"), "=", modRev)).
		Else(clientv3.OpPut("other", "x")).Commit()
	if err != nil {
		t.Fatal(err)
	}
	if w.Succeeded || server.AppliedIndex(a.srv) == before {
		t.Fatalf("a failure branch with a put was not logged (succeeded %v)", w.Succeeded)
	}
	if g, err := b.cli.Get(c, "other"); err != nil || len(g.Kvs) != 1 {
		t.Fatalf("the failure branch's put is missing on the replica: %v", err)
	}
}
