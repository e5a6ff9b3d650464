package etcdctl

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
)

// seedKeys writes the dataset the get tests read, one revision per write:
//
//	rev 2 key1=val1   rev 5 key1=val1b   rev 8 zzz=last
//	rev 3 key2=val2   rev 6 key2=val2b
//	rev 4 key3=val3   rev 7 key1=val1c
//
// Final state: key1=val1c (create 2, mod 7, version 3), key2=val2b
// (create 3, mod 6, version 2), key3=val3 (create 4, mod 4, version 1),
// zzz=last (create 8, mod 8, version 1). Every sort target orders key1..key3
// without ties.
func seedKeys(t *testing.T, c *ctl) {
	t.Helper()
	writes := [][2]string{
		{"key1", "val1"}, {"key2", "val2"}, {"key3", "val3"},
		{"key1", "val1b"}, {"key2", "val2b"}, {"key1", "val1c"}, {"zzz", "last"},
	}
	for i, w := range writes {
		if rev := c.put(t, w[0], w[1]); rev != int64(i+2) {
			t.Fatalf("put %s=%s: revision %d, want %d", w[0], w[1], rev, i+2)
		}
	}
}

// TestPutOutput checks put's plain and --prev-kv output and that each put
// advances the revision by one.
func TestPutOutput(t *testing.T) {
	c := newCtl(t)
	c.expect(t, "OK\n", "put", "p", "v1")
	c.expect(t, lines("OK", "p", "v1"), "put", "p", "v2", "--prev-kv")
	c.expect(t, "OK\n", "put", "q", "x", "--prev-kv") // no previous kv: nothing more
	if rev := c.put(t, "p", "v3"); rev != 5 {
		t.Errorf("fourth write's revision = %d, want 5", rev)
	}
	// --ignore-value keeps the current value; it needs an existing key.
	c.expect(t, "OK\n", "put", "p", "--ignore-value")
	c.expect(t, lines("p", "v3"), "get", "p")
	c.expectErr(t, "etcdserver: key not found", "put", "nokey", "--ignore-value")
}

// TestGet covers get's range and formatting flags against seedKeys' data.
func TestGet(t *testing.T) {
	c := newCtl(t)
	seedKeys(t, c)
	k1, k2, k3 := lines("key1", "val1c"), lines("key2", "val2b"), lines("key3", "val3")
	zzz := lines("zzz", "last")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"single key", []string{"get", "key1"}, k1},
		{"missing key", []string{"get", "nope"}, ""},
		{"explicit range", []string{"get", "key1", "key3"}, k1 + k2},
		{"prefix", []string{"get", "key", "--prefix"}, k1 + k2 + k3},
		{"empty prefix is everything", []string{"get", "", "--prefix"}, k1 + k2 + k3 + zzz},
		{"from-key", []string{"get", "key2", "--from-key"}, k2 + k3 + zzz},
		{"from-key empty is everything", []string{"get", "", "--from-key"}, k1 + k2 + k3 + zzz},
		{"limit", []string{"get", "key", "--prefix", "--limit", "2"}, k1 + k2},
		{"sort key descend", []string{"get", "key", "--prefix", "--sort-by=KEY", "--order=DESCEND"}, k3 + k2 + k1},
		{"order descend defaults to key", []string{"get", "key", "--prefix", "--order=DESCEND"}, k3 + k2 + k1},
		{"sort create descend", []string{"get", "key", "--prefix", "--sort-by=CREATE", "--order=DESCEND"}, k3 + k2 + k1},
		{"sort modify ascend", []string{"get", "key", "--prefix", "--sort-by=MODIFY", "--order=ASCEND"}, k3 + k2 + k1},
		{"sort modify without order ascends", []string{"get", "key", "--prefix", "--sort-by=MODIFY"}, k3 + k2 + k1},
		{"sort modify descend", []string{"get", "key", "--prefix", "--sort-by=MODIFY", "--order=DESCEND"}, k1 + k2 + k3},
		{"sort version ascend", []string{"get", "key", "--prefix", "--sort-by=VERSION", "--order=ASCEND"}, k3 + k2 + k1},
		{"sort value descend", []string{"get", "key", "--prefix", "--sort-by=VALUE", "--order=DESCEND"}, k3 + k2 + k1},
		{"sort then limit", []string{"get", "key", "--prefix", "--sort-by=MODIFY", "--order=DESCEND", "--limit", "1"}, k1},
		{"rev before overwrite", []string{"get", "key1", "--rev=4"}, lines("key1", "val1")},
		{"rev between overwrites", []string{"get", "key1", "--rev=5"}, lines("key1", "val1b")},
		{"rev before creation", []string{"get", "zzz", "--rev=7"}, ""},
		{"prefix at rev", []string{"get", "key", "--prefix", "--rev=3"}, lines("key1", "val1", "key2", "val2")},
		{"keys-only", []string{"get", "key", "--prefix", "--keys-only"}, "key1\n\nkey2\n\nkey3\n\n"},
		{"print-value-only", []string{"get", "key", "--prefix", "--print-value-only"}, lines("val1c", "val2b", "val3")},
		{"serializable", []string{"get", "key1", "--consistency=s"}, k1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c.expect(t, tc.want, tc.args...)
		})
	}

	t.Run("count-only", func(t *testing.T) {
		c.requireCtl(t, 3, 5, "--count-only")
		out := c.ok(t, "get", "key", "--prefix", "--count-only", "-w", "fields")
		if !strings.Contains(out, "\"Count\" : 3\n") || strings.Contains(out, "\"Key\"") {
			t.Errorf("get --count-only -w fields: want Count 3 and no keys, got:\n%s", out)
		}
	})

	t.Run("json single", func(t *testing.T) {
		var r getResp
		c.json(t, &r, "get", "key1")
		if r.Header.Revision != 8 || r.Count != 1 || r.More || len(r.Kvs) != 1 {
			t.Fatalf("get key1 -w json: header.revision=%d count=%d more=%v kvs=%d; want 8,1,false,1", r.Header.Revision, r.Count, r.More, len(r.Kvs))
		}
		want := kv{Key: []byte("key1"), Value: []byte("val1c"), CreateRevision: 2, ModRevision: 7, Version: 3}
		if got := r.Kvs[0]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("kv = %+v, want %+v", got, want)
		}
	})

	t.Run("json limit sets more and full count", func(t *testing.T) {
		var r getResp
		c.json(t, &r, "get", "key", "--prefix", "--limit", "1")
		if !r.More || r.Count != 3 || len(r.Kvs) != 1 || string(r.Kvs[0].Key) != "key1" {
			t.Errorf("get --prefix --limit 1: more=%v count=%d kvs=%v; want more, count 3, [key1]", r.More, r.Count, r.Kvs)
		}
	})

	t.Run("json keys-only omits values", func(t *testing.T) {
		var r getResp
		c.json(t, &r, "get", "key", "--prefix", "--keys-only")
		if len(r.Kvs) != 3 {
			t.Fatalf("kvs = %v, want 3", r.Kvs)
		}
		for _, kv := range r.Kvs {
			if len(kv.Value) != 0 || kv.ModRevision == 0 {
				t.Errorf("keys-only kv %q: value %q (want empty), mod_revision %d (want set)", kv.Key, kv.Value, kv.ModRevision)
			}
		}
	})

	t.Run("json raw encodes bytes as base64", func(t *testing.T) {
		out := c.ok(t, "get", "zzz", "-w", "json")
		want := fmt.Sprintf(`"key":%q`, base64.StdEncoding.EncodeToString([]byte("zzz")))
		if !strings.Contains(out, want) || !strings.Contains(out, `"value":"bGFzdA=="`) {
			t.Errorf("get zzz -w json = %s; want %s and value bGFzdA==", out, want)
		}
	})

	t.Run("future revision", func(t *testing.T) {
		c.expectErr(t, "etcdserver: mvcc: required revision is a future revision", "get", "key1", "--rev=100")
	})
}

// TestDel covers del of a key, a prefix, from-key, --prev-kv and counts.
func TestDel(t *testing.T) {
	c := newCtl(t)
	for _, k := range []string{"a1", "a2", "a3", "b1", "c1", "c2", "d1"} {
		c.put(t, k, "v"+k)
	}
	c.expect(t, "1\n", "del", "a1")
	c.expect(t, "0\n", "del", "a1")
	c.expect(t, "0\n", "del", "missing")
	c.expect(t, "2\n", "del", "a", "--prefix")
	c.expect(t, lines("1", "b1", "vb1"), "del", "b1", "--prev-kv")
	c.expect(t, lines("2", "c1", "vc1", "c2", "vc2"), "del", "c", "--prefix", "--prev-kv")
	c.put(t, "e1", "ve1")
	c.expect(t, "1\n", "del", "e", "--from-key")
	c.expect(t, lines("d1", "vd1"), "get", "", "--prefix")
	var r struct {
		Header  header `json:"header"`
		Deleted int64  `json:"deleted"`
	}
	before := c.rev(t)
	c.json(t, &r, "del", "", "--from-key")
	if r.Deleted != 1 || r.Header.Revision != before+1 {
		t.Errorf("del --from-key '' -w json: deleted=%d revision=%d; want 1, %d", r.Deleted, r.Header.Revision, before+1)
	}
	c.expect(t, "", "get", "", "--prefix")
	// A delete that removes nothing does not advance the revision.
	r.Deleted, r.Header = 0, header{} // "deleted":0 is omitted from the JSON
	c.json(t, &r, "del", "gone")
	if r.Deleted != 0 || r.Header.Revision != before+1 {
		t.Errorf("del of a missing key: deleted=%d revision=%d; want 0, %d", r.Deleted, r.Header.Revision, before+1)
	}
}

// TestTxn drives `txn --interactive` through stdin with compares on value,
// version, create and mod revision and lease, and checks which branch ran.
func TestTxn(t *testing.T) {
	c := newCtl(t)
	c.put(t, "t1", "v1")    // rev 2
	c.put(t, "t1", "v1b")   // rev 3: t1 create 2, mod 3, version 2
	c.put(t, "t2", "other") // rev 4
	var grant struct{ ID int64 }
	c.json(t, &grant, "lease", "grant", "600")
	leaseHex := fmt.Sprintf("%x", grant.ID)
	c.put(t, "leased", "x", "--lease="+leaseHex) // rev 5

	const prompts = "compares:\nsuccess requests (get, put, del):\nfailure requests (get, put, del):\n"
	// Each section is its lines followed by an empty line.
	section := func(ls []string) string {
		var b strings.Builder
		for _, l := range ls {
			b.WriteString(l + "\n")
		}
		return b.String() + "\n"
	}
	txn := func(compares, success, failure []string) string {
		return section(compares) + section(success) + section(failure)
	}
	cases := []struct {
		name     string
		compares []string
		want     string
	}{
		{"value equal", []string{`val("t1") = "v1b"`}, "SUCCESS"},
		{"value not equal", []string{`value("t1") != "v1"`}, "SUCCESS"},
		{"value greater", []string{`val("t1") > "v1a"`}, "SUCCESS"},
		{"value mismatch", []string{`val("t1") = "v1"`}, "FAILURE"},
		{"value of missing key", []string{`val("missing") = ""`}, "FAILURE"},
		{"version equal", []string{`ver("t1") = "2"`}, "SUCCESS"},
		{"version of missing key is 0", []string{`version("missing") = "0"`}, "SUCCESS"},
		{"version less", []string{`ver("t1") < "2"`}, "FAILURE"},
		{"create revision", []string{`create("t1") = "2"`}, "SUCCESS"},
		{"create revision mismatch", []string{`c("t1") = "3"`}, "FAILURE"},
		{"mod revision", []string{`mod("t1") = "3"`}, "SUCCESS"},
		{"mod revision greater", []string{`m("t2") > "3"`}, "SUCCESS"},
		{"lease equal", []string{`lease("leased") = "` + leaseHex + `"`}, "SUCCESS"},
		{"no lease is 0", []string{`lease("t1") = "0"`}, "SUCCESS"},
		{"lease mismatch", []string{`lease("t1") = "` + leaseHex + `"`}, "FAILURE"},
		{"all compares must hold", []string{`val("t1") = "v1b"`, `ver("t2") = "2"`}, "FAILURE"},
		{"several compares hold", []string{`val("t1") = "v1b"`, `ver("t2") = "1"`, `mod("t1") < "4"`}, "SUCCESS"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if strings.HasPrefix(tc.compares[0], "lease(") {
				c.requireCtl(t, 3, 5, "txn lease() compares") // etcdctl 3.4 panics on them
			}
			in := txn(tc.compares, []string{"get t1"}, []string{"get t2"})
			r := c.runIn(in, "txn", "--interactive")
			if r.err != nil {
				t.Fatalf("txn: %s", r)
			}
			want := prompts + "SUCCESS\n\n" + lines("t1", "v1b")
			if tc.want == "FAILURE" {
				want = prompts + "FAILURE\n\n" + lines("t2", "other")
			}
			if r.stdout != want {
				t.Errorf("txn %v\n got: %q\nwant: %q", tc.compares, r.stdout, want)
			}
		})
	}

	t.Run("success branch writes", func(t *testing.T) {
		before := c.rev(t)
		in := txn([]string{`val("t1") = "v1b"`}, []string{"put t3 new", "del t2", "get t3"}, []string{"put never x"})
		r := c.runIn(in, "txn", "--interactive")
		want := prompts + "SUCCESS\n\nOK\n\n1\n\n" + lines("t3", "new")
		if r.err != nil || r.stdout != want {
			t.Fatalf("txn\n got: %q (%v)\nwant: %q", r.stdout, r.err, want)
		}
		// One txn is one revision, whatever it changes.
		var g getResp
		c.json(t, &g, "get", "t3")
		if len(g.Kvs) != 1 || g.Kvs[0].ModRevision != before+1 || g.Header.Revision != before+1 {
			t.Errorf("after txn: t3=%v header.revision=%d; want mod_revision=revision=%d", g.Kvs, g.Header.Revision, before+1)
		}
		c.expect(t, "", "get", "t2")
		c.expect(t, "", "get", "never")
	})

	t.Run("failure branch writes", func(t *testing.T) {
		in := txn([]string{`ver("t1") = "99"`}, []string{"put never x"}, []string{"put t4 fallback", "get t4"})
		r := c.runIn(in, "txn", "--interactive")
		want := prompts + "FAILURE\n\nOK\n\n" + lines("t4", "fallback")
		if r.err != nil || r.stdout != want {
			t.Fatalf("txn\n got: %q (%v)\nwant: %q", r.stdout, r.err, want)
		}
		c.expect(t, "", "get", "never")
	})

	t.Run("prefix get and range delete in txn", func(t *testing.T) {
		in := txn(nil, []string{"get t --prefix --keys-only", "del t --prefix"}, nil)
		r := c.runIn(in, "txn", "--interactive")
		want := prompts + "SUCCESS\n\nt1\n\nt3\n\nt4\n\n\n3\n"
		if r.err != nil || r.stdout != want {
			t.Fatalf("txn\n got: %q (%v)\nwant: %q", r.stdout, r.err, want)
		}
	})

	t.Run("non-interactive json", func(t *testing.T) {
		before := c.rev(t)
		in := txn([]string{`val("leased") = "x"`}, []string{"put t5 v"}, nil)
		var r struct {
			Header    header `json:"header"`
			Succeeded bool   `json:"succeeded"`
			Responses []any  `json:"responses"`
		}
		out := c.runIn(in, "txn", "-w", "json")
		if out.err != nil {
			t.Fatalf("txn -w json: %s", out)
		}
		if err := jsonDecode(out.stdout, &r); err != nil {
			t.Fatal(err)
		}
		if !r.Succeeded || r.Header.Revision != before+1 || len(r.Responses) != 1 {
			t.Errorf("txn -w json: succeeded=%v revision=%d responses=%d; want true, %d, 1", r.Succeeded, r.Header.Revision, len(r.Responses), before+1)
		}
	})

	t.Run("read-only txn keeps revision", func(t *testing.T) {
		before := c.rev(t)
		var r struct {
			Header    header `json:"header"`
			Succeeded bool   `json:"succeeded"`
		}
		out := c.runIn(txn([]string{`val("t5") = "nope"`}, []string{"put t6 v"}, []string{"get t5"}), "txn", "-w", "json")
		if err := jsonDecode(out.stdout, &r); err != nil || out.err != nil {
			t.Fatalf("txn -w json: %v %s", err, out)
		}
		if r.Succeeded || r.Header.Revision != before {
			t.Errorf("failed read-only txn: succeeded=%v revision=%d; want false, %d", r.Succeeded, r.Header.Revision, before)
		}
	})

	t.Run("duplicate key in txn is rejected", func(t *testing.T) {
		r := c.runIn(txn(nil, []string{"put dup a", "put dup b"}, nil), "txn")
		if r.err == nil || !strings.Contains(r.stderr, "etcdserver: duplicate key given in txn request") {
			t.Errorf("txn with two puts of one key: want error 'duplicate key given in txn request', got %s", r)
		}
	})
}

// TestCompaction checks compaction's output, that compacted revisions are
// gone while later ones stay readable, and --physical.
func TestCompaction(t *testing.T) {
	c := newCtl(t)
	for i := 1; i <= 6; i++ {
		c.put(t, "ck", fmt.Sprintf("v%d", i)) // revs 2..7
	}
	c.expect(t, "compacted revision 4\n", "compaction", "4")
	c.expectErr(t, "etcdserver: mvcc: required revision has been compacted", "get", "ck", "--rev=3")
	c.expect(t, lines("ck", "v3"), "get", "ck", "--rev=4")
	c.expect(t, lines("ck", "v6"), "get", "ck")
	c.expectErr(t, "etcdserver: mvcc: required revision has been compacted", "compaction", "4")
	c.expectErr(t, "etcdserver: mvcc: required revision has been compacted", "compaction", "2")
	c.expectErr(t, "etcdserver: mvcc: required revision is a future revision", "compaction", "100")
	c.expect(t, "compacted revision 6\n", "compaction", "--physical", "6")
	c.expectErr(t, "etcdserver: mvcc: required revision has been compacted", "get", "ck", "--rev=5")
	c.expect(t, lines("ck", "v5"), "get", "ck", "--rev=6")

	t.Run("watch from compacted revision is canceled", func(t *testing.T) {
		r := c.run("watch", "ck", "--rev=2")
		out := r.stdout + r.stderr
		if !strings.Contains(out, "required revision has been compacted") {
			t.Errorf("watch --rev=2 after compaction: want cancellation mentioning compaction, got %s", r)
		}
	})

	t.Run("hashkv reports compact revision", func(t *testing.T) {
		var hs []struct {
			HashKV struct {
				Hash            uint32 `json:"hash"`
				CompactRevision int64  `json:"compact_revision"`
			}
		}
		c.json(t, &hs, "endpoint", "hashkv")
		if len(hs) != 1 || hs[0].HashKV.CompactRevision != 6 {
			t.Errorf("endpoint hashkv after compaction 6: %+v; want compact_revision 6", hs)
		}
	})
}

// TestRequestLimits checks the errors etcd returns for requests over its
// default limits (1.5 MiB request size, 128 txn operations) and for an
// empty key, and that none of them changed anything.
func TestRequestLimits(t *testing.T) {
	c := newCtl(t)
	before := c.rev(t)

	t.Run("request too large", func(t *testing.T) {
		// put reads the value from stdin when it is not an argument. 1.6 MiB
		// is over --max-request-bytes (1.5 MiB) but under the gRPC message
		// limit (that plus 0.5 MiB), so the server's own check answers.
		r := c.runIn(strings.Repeat("x", 1600<<10), "put", "big")
		if r.err == nil || !strings.Contains(r.stderr, "etcdserver: request is too large") {
			t.Errorf("put of a 1.6 MiB value: want 'etcdserver: request is too large', got %s", r)
		}
		c.expect(t, "", "get", "big")
	})
	t.Run("value just under the limit", func(t *testing.T) {
		r := c.runIn(strings.Repeat("y", 1<<20), "put", "large")
		if r.err != nil || r.stdout != "OK\n" {
			t.Fatalf("put of a 1 MiB value: %s", r)
		}
		var g getResp
		c.json(t, &g, "get", "large")
		if len(g.Kvs) != 1 || len(g.Kvs[0].Value) != 1<<20 {
			t.Errorf("get large: %d kvs, want one 1 MiB value", len(g.Kvs))
		}
		c.ok(t, "del", "large")
		before = c.rev(t)
	})
	t.Run("too many txn ops", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("\n") // no compares
		for i := 0; i < 129; i++ {
			fmt.Fprintf(&b, "put many%03d v\n", i)
		}
		b.WriteString("\n\n")
		r := c.runIn(b.String(), "txn")
		if r.err == nil || !strings.Contains(r.stderr, "etcdserver: too many operations in txn request") {
			t.Errorf("txn with 129 puts: want 'etcdserver: too many operations in txn request', got %s", r)
		}
		c.expect(t, "", "get", "many", "--prefix")
	})
	t.Run("128 txn ops are allowed", func(t *testing.T) {
		var b strings.Builder
		b.WriteString("\n")
		for i := 0; i < 128; i++ {
			fmt.Fprintf(&b, "put ok%03d v\n", i)
		}
		b.WriteString("\n\n")
		r := c.runIn(b.String(), "txn")
		if r.err != nil || !strings.HasPrefix(r.stdout, "SUCCESS\n") {
			t.Fatalf("txn with 128 puts: %s", r)
		}
		var g getResp
		c.json(t, &g, "get", "ok", "--prefix", "--keys-only")
		if g.Count != 128 || g.Header.Revision != before+1 {
			t.Errorf("after 128-op txn: count=%d revision=%d; want 128 keys written at revision %d", g.Count, g.Header.Revision, before+1)
		}
		before = g.Header.Revision
	})
	t.Run("empty key", func(t *testing.T) {
		c.expectErr(t, "etcdserver: key is not provided", "put", "", "v")
	})
	if got := c.rev(t); got != before {
		t.Errorf("revision after rejected requests = %d, want %d", got, before)
	}
}
