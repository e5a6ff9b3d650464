package mvcc

import (
	"bytes"
	"testing"
)

// FuzzParseRevBytes: keys of the "key" bucket come from the data file, so
// any bytes must parse or give an error without panicking, and a key that
// parses must be exactly the encoding of what it parsed to.
func FuzzParseRevBytes(f *testing.F) {
	f.Add(RevBytes(Revision{Main: 5, Sub: 1}))
	f.Add(TombstoneBytes(Revision{Main: 1 << 40, Sub: 0}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, tomb, err := ParseRevBytes(b)
		if err != nil {
			return
		}
		want := RevBytes(r)
		if tomb {
			want = TombstoneBytes(r)
		}
		if !bytes.Equal(want, b) {
			t.Fatalf("ParseRevBytes(%x) = %+v tombstone=%v, which encodes as %x", b, r, tomb, want)
		}
	})
}
