package conflict

import (
	"bytes"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

func TestSaveLoadList(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conflicts")
	if got, err := List(dir); err != nil || len(got) != 0 {
		t.Fatalf("List of a missing dir: %v %v", got, err)
	}
	s := &Set{Version: FormatVersion, Created: time.Unix(100, 0).UTC(), Member: "a", DivergedAt: 7, BaseRevision: 9, LoserRevision: 12,
		Keys:    []Key{{Key: []byte("k"), Value: []byte{0, 1, 2}, ModRevision: 12}, {Key: []byte("gone"), Deleted: true, ModRevision: 11}},
		Entries: []Entry{{Index: 8, Epoch: "3/a", Revision: 10, Summary: "put \"k\""}}}
	p1, err := Save(dir, "0001-split.json", s)
	if err != nil {
		t.Fatal(err)
	}
	// A second export of the same split brain keeps the first file.
	other := *s
	other.LoserRevision = 99
	if p, err := Save(dir, "0001-split.json", &other); err != nil || p != p1 {
		t.Fatalf("second save: %s %v", p, err)
	}
	if _, err := Save(dir, "0000-split.json", s); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p1)
	if err != nil {
		t.Fatal(err)
	}
	if got.LoserRevision != 12 || len(got.Keys) != 2 || string(got.Keys[0].Value) != "\x00\x01\x02" || !got.Keys[1].Deleted || got.Entries[0].Index != 8 {
		t.Fatalf("loaded %+v", got)
	}
	paths, err := List(dir)
	if err != nil || len(paths) != 2 || filepath.Base(paths[0]) != "0000-split.json" {
		t.Fatalf("List = %v %v", paths, err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"version": 99}`), 0o600)
	if _, err := Load(bad); err == nil {
		t.Fatal("a set of an unknown format version loaded")
	}
}

func TestResolutionsAndAccept(t *testing.T) {
	p := filepath.Join(t.TempDir(), "s.json")
	if Accepted(p) {
		t.Fatal("accepted before Accept")
	}
	if err := Accept(p); err != nil || !Accepted(p) {
		t.Fatalf("Accept: %v", err)
	}
	if r, err := Resolved(p); err != nil || len(r) != 0 {
		t.Fatalf("Resolved before any: %v %v", r, err)
	}
	for _, r := range []Resolution{{Key: []byte("a"), Action: "dismissed"}, {Key: []byte("b"), Action: "applied", Revision: 5}, {Key: []byte("a"), Action: "applied", Revision: 6}} {
		if err := Record(p, r); err != nil {
			t.Fatal(err)
		}
	}
	// A line torn by a crash is ignored.
	f, _ := os.OpenFile(p+".applied", os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"key":"Yw==","act`)
	f.Close()
	r, err := Resolved(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(r) != 2 || r["a"].Revision != 6 || r["b"].Action != "applied" {
		t.Fatalf("Resolved = %+v", r)
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		req  *pb.InternalRaftRequest
		want string
	}{
		{&pb.InternalRaftRequest{Put: &pb.PutRequest{Key: []byte("/registry/pods/a"), Value: []byte("xyz"), Lease: 0x1f}}, `put "/registry/pods/a" (3 bytes) with lease 1f`},
		{&pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a")}}, `delete "a"`},
		{&pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte("b")}}, `delete ["a", "b")`},
		{&pb.InternalRaftRequest{DeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}, `delete from "a" on`},
		{&pb.InternalRaftRequest{Txn: &pb.TxnRequest{Compare: []*pb.Compare{{}}, Success: []*pb.RequestOp{{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k")}}}}}}, `txn (1 compares; writes: put "k")`},
		{&pb.InternalRaftRequest{LeaseGrant: &pb.LeaseGrantRequest{ID: 0x10, TTL: 15}}, "lease grant 10 ttl 15s"},
		{&pb.InternalRaftRequest{LeaseRevoke: &pb.LeaseRevokeRequest{ID: 0x10}}, "lease revoke 10"},
		{&pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: 4}}, "compact at 4"},
	}
	for _, tt := range tests {
		if got := Summarize(tt.req); got != tt.want {
			t.Errorf("Summarize = %q, want %q", got, tt.want)
		}
	}
}

// TestLoadDetectsCorruption checks that a saved set loads back intact and
// that any changed byte inside it (a value, a revision, the checksum
// itself) or a truncation makes Load fail rather than return other data.
func TestLoadDetectsCorruption(t *testing.T) {
	dir := t.TempDir()
	s := &Set{Version: FormatVersion, Created: time.Unix(1735787045, 6).In(time.FixedZone("x", 3600)), Member: "a",
		Keys:    []Key{{Key: []byte("k"), Value: []byte("value-bytes"), ModRevision: 12}},
		Entries: []Entry{{Index: 8, Epoch: "3/a", Time: time.Unix(5, 7).UTC(), Revision: 10, Summary: "put", Request: []byte{9, 8, 7}}}}
	p, err := Save(dir, "s.json", s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(p); err != nil {
		t.Fatalf("intact set: %v", err)
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		edit func([]byte) []byte
	}{
		{"value changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(base64.StdEncoding.EncodeToString([]byte("value-bytes"))), []byte(base64.StdEncoding.EncodeToString([]byte("value-bytez"))), 1)
		}},
		{"revision changed", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"modRevision": 12`), []byte(`"modRevision": 13`), 1)
		}},
		{"checksum changed", func(b []byte) []byte {
			i := bytes.Index(b, []byte(`"sha256": "`)) + len(`"sha256": "`)
			b[i] ^= 1
			return b
		}},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := tt.edit(bytes.Clone(raw))
			if bytes.Equal(bad, raw) {
				t.Fatal("the edit changed nothing")
			}
			q := filepath.Join(t.TempDir(), "bad.json")
			if err := os.WriteFile(q, bad, 0o600); err != nil {
				t.Fatal(err)
			}
			if _, err := Load(q); err == nil {
				t.Fatal("a corrupted set loaded")
			}
		})
	}
}
