package conflict

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// The conflict files are read back by `dyad resolve` after a crash or by an
// operator who may have edited them, so any content must load or fail with
// an error, never panic; whatever loads must survive a save/load round trip,
// and every logged request it holds must be summarizable.

func seedSet() []byte {
	req := &pb.InternalRaftRequest{Txn: &pb.TxnRequest{Success: []*pb.RequestOp{
		{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{Key: []byte("k"), Value: []byte("v")}}},
		{Request: &pb.RequestOp_RequestDeleteRange{RequestDeleteRange: &pb.DeleteRangeRequest{Key: []byte("a"), RangeEnd: []byte{0}}}},
	}}}
	data, _ := req.Marshal()
	s := Set{Version: FormatVersion, Created: time.Unix(100, 0).UTC(), Member: "a", Winner: "3/b", DivergedAt: 7,
		Keys:    []Key{{Key: []byte("k"), Value: []byte{0, 1}, ModRevision: 12, Lease: 5}, {Key: []byte("\xff"), Deleted: true}},
		Entries: []Entry{{Index: 8, Epoch: "3/a", Revision: 10, Summary: Summarize(req), Request: data}}}
	b, _ := json.Marshal(s)
	return b
}

func FuzzLoad(f *testing.F) {
	f.Add(seedSet())
	f.Add([]byte(`{"version":1,"keys":null,"entries":[{"request":"!!"}]}`))
	f.Add([]byte(`{"version":2}`))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(dir, "set.json")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Load(path)
		if err != nil {
			return
		}
		if s.Version != FormatVersion {
			t.Fatalf("loaded a set of version %d", s.Version)
		}
		for _, e := range s.Entries {
			var req pb.InternalRaftRequest
			if req.Unmarshal(e.Request) == nil {
				_ = Summarize(&req)
			}
		}
		out := filepath.Join(t.TempDir(), "out")
		p, err := Save(out, "again.json", s)
		if err != nil {
			t.Fatalf("saving a loaded set: %v", err)
		}
		s2, err := Load(p)
		if err != nil {
			t.Fatalf("a saved set does not load: %v", err)
		}
		if !reflect.DeepEqual(normalize(s), normalize(s2)) {
			t.Fatalf("round trip changed the set:\n%+v\n%+v", s, s2)
		}
	})
}

// normalize drops what JSON cannot round-trip exactly: time zones and
// monotonic clock readings, and empty versus nil slices; and the checksum.
func normalize(s *Set) Set {
	c := *s
	c.Created = c.Created.UTC().Round(0)
	// Save computes the checksum afresh; a set loaded from a file written
	// before checksums existed has none.
	c.SHA256 = ""
	c.Keys = append([]Key(nil), s.Keys...)
	for i := range c.Keys {
		if len(c.Keys[i].Key) == 0 {
			c.Keys[i].Key = nil
		}
		if len(c.Keys[i].Value) == 0 {
			c.Keys[i].Value = nil
		}
	}
	c.Entries = append([]Entry(nil), s.Entries...)
	for i := range c.Entries {
		c.Entries[i].Time = c.Entries[i].Time.UTC().Round(0)
		if len(c.Entries[i].Request) == 0 {
			c.Entries[i].Request = nil
		}
	}
	return c
}

// FuzzResolved feeds arbitrary resolution logs: torn or garbled lines are
// skipped, never fatal, and each key keeps its newest resolution.
func FuzzResolved(f *testing.F) {
	line, _ := json.Marshal(Resolution{Key: []byte("k"), Action: "applied", At: time.Unix(5, 0).UTC(), Revision: 9})
	f.Add(append(append(line, '\n'), `{"key":"az`...))
	f.Add([]byte("\n\n{}\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		set := filepath.Join(dir, "set.json")
		if err := os.WriteFile(set+".applied", b, 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := Resolved(set)
		if err != nil {
			return // a line longer than the scanner takes
		}
		for k, r := range got {
			if k != string(r.Key) {
				t.Fatalf("resolution of %q filed under %q", r.Key, k)
			}
		}
	})
}
