package lease

import (
	"bytes"
	"testing"
)

// FuzzDecodeRecord feeds arbitrary bytes to the decoder of the lease records
// kept in the data file (etcd's leasepb.Lease): it must decode or fail,
// never panic, and a decoded record must re-encode to a fixed point.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(EncodeRecord(7, 60))
	f.Add(EncodeRecord(-1, 1<<40))
	f.Add(EncodeRecord(0, 0))
	// etcd's checkpointed RemainingTTL (field 3) is skipped.
	f.Add(append(EncodeRecord(5, 10), 0x18, 0x05))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ttl, err := DecodeRecord(b)
		if err != nil {
			return
		}
		once := EncodeRecord(id, ttl)
		id2, ttl2, err := DecodeRecord(once)
		if err != nil {
			t.Fatalf("re-encoded record %x does not decode: %v", once, err)
		}
		if id2 != id || ttl2 != ttl || !bytes.Equal(EncodeRecord(id2, ttl2), once) {
			t.Fatalf("round trip changed (%d, %d) into (%d, %d)", id, ttl, id2, ttl2)
		}
	})
}
