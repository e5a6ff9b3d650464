package mvcc

import (
	"bytes"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// TestDecodeIndexFields: the restart's decoder reads the same key, create
// revision, version and lease as the full unmarshal, for records with and
// without each field, and rejects truncated records.
func TestDecodeIndexFields(t *testing.T) {
	for _, kv := range []mvccpb.KeyValue{
		{Key: []byte("/registry/pods/a"), CreateRevision: 2, ModRevision: 9, Version: 3, Value: bytes.Repeat([]byte("v"), 2048), Lease: 0x694d9d0a8b7c6e01},
		{Key: []byte("k"), CreateRevision: 1 << 40, ModRevision: 1 << 40, Version: 1},
		{Key: []byte("tomb"), ModRevision: 7}, // a tombstone's value
		{Key: []byte("neg"), CreateRevision: 5, Version: 2, Lease: -1},
		{},
	} {
		rec, err := kv.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		f, err := decodeIndexFields(rec)
		if err != nil {
			t.Fatalf("%q: %v", kv.Key, err)
		}
		if !bytes.Equal(f.key, kv.Key) || f.createRevision != kv.CreateRevision || f.version != kv.Version || f.lease != kv.Lease {
			t.Errorf("%q: decoded %+v, want create %d version %d lease %d", kv.Key, f, kv.CreateRevision, kv.Version, kv.Lease)
		}
		for cut := 1; cut < len(rec) && cut < 40; cut++ {
			var full mvccpb.KeyValue
			if full.Unmarshal(rec[:len(rec)-cut]) != nil {
				if _, err := decodeIndexFields(rec[:len(rec)-cut]); err == nil {
					t.Errorf("%q cut by %d: the full unmarshal fails, the decoder accepts it", kv.Key, cut)
				}
			}
		}
	}
}
