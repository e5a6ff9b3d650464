package mvcc

import (
	"encoding/binary"
	"errors"
)

// indexFields is what rebuilding the index needs of a stored KeyValue.
type indexFields struct {
	key            []byte // aliases the record: copy before keeping it
	createRevision int64
	version        int64
	lease          int64
}

var errKVRecord = errors.New("malformed KeyValue record")

// decodeIndexFields reads the key, create revision, version and lease of
// a marshalled mvccpb.KeyValue without copying its value. A restart reads
// every record of the key bucket, and unmarshalling them whole copied each
// value (kilobytes per object) only to drop it. Unknown fields are skipped
// as protobuf does; a record it cannot parse is reported, and the caller
// falls back to the full unmarshal for the error.
func decodeIndexFields(b []byte) (indexFields, error) {
	var f indexFields
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return f, errKVRecord
		}
		b = b[n:]
		field, wire := tag>>3, tag&7
		switch wire {
		case 0: // varint
			v, n := binary.Uvarint(b)
			if n <= 0 {
				return f, errKVRecord
			}
			b = b[n:]
			switch field {
			case 2:
				f.createRevision = int64(v)
			case 4:
				f.version = int64(v)
			case 6:
				f.lease = int64(v)
			}
		case 2: // length-delimited
			l, n := binary.Uvarint(b)
			if n <= 0 || l > uint64(len(b)-n) {
				return f, errKVRecord
			}
			if field == 1 {
				f.key = b[n : n+int(l)]
			}
			b = b[n+int(l):]
		case 1: // fixed64
			if len(b) < 8 {
				return f, errKVRecord
			}
			b = b[8:]
		case 5: // fixed32
			if len(b) < 4 {
				return f, errKVRecord
			}
			b = b[4:]
		default:
			return f, errKVRecord
		}
	}
	return f, nil
}
