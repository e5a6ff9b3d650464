package mvcc

import (
	"encoding/binary"
	"fmt"
)

// Revision identifies one change: Main is the etcd revision of the
// transaction, Sub the change's position inside it.
type Revision struct {
	Main int64
	Sub  int64
}

// GreaterThan orders revisions.
func (r Revision) GreaterThan(o Revision) bool {
	if r.Main != o.Main {
		return r.Main > o.Main
	}
	return r.Sub > o.Sub
}

const (
	revBytesLen       = 17
	markedRevBytesLen = 18
	markTombstone     = 't'
)

// RevBytes encodes r as a key of the "key" bucket.
func RevBytes(r Revision) []byte {
	b := make([]byte, revBytesLen, markedRevBytesLen)
	binary.BigEndian.PutUint64(b[0:8], uint64(r.Main))
	b[8] = '_'
	binary.BigEndian.PutUint64(b[9:], uint64(r.Sub))
	return b
}

// TombstoneBytes encodes r as the key of a deletion marker.
func TombstoneBytes(r Revision) []byte { return append(RevBytes(r), markTombstone) }

// ParseRevBytes decodes a "key" bucket key and tells whether it marks a
// deletion.
func ParseRevBytes(b []byte) (Revision, bool, error) {
	switch {
	case len(b) == revBytesLen && b[8] == '_':
		return Revision{int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[9:]))}, false, nil
	case len(b) == markedRevBytesLen && b[8] == '_' && b[17] == markTombstone:
		return Revision{int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[9:]))}, true, nil
	}
	return Revision{}, false, fmt.Errorf("mvcc: malformed revision key %x", b)
}
