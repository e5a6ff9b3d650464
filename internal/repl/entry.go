package repl

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Epoch names one period of one node's leadership. Every role change, and
// entering solo, starts a new one.
type Epoch struct {
	Term uint64
	Node uint64
}

// Less orders epochs by term, then node.
func (e Epoch) Less(o Epoch) bool {
	if e.Term != o.Term {
		return e.Term < o.Term
	}
	return e.Node < o.Node
}

// IsZero reports the empty epoch (before any leadership).
func (e Epoch) IsZero() bool { return e.Term == 0 && e.Node == 0 }

func (e Epoch) String() string { return fmt.Sprintf("%d/%x", e.Term, e.Node) }

// Entry is one replicated state change.
type Entry struct {
	Index uint64
	Epoch Epoch
	// Origin and ReqID identify the client request: the node that received
	// it and that node's request number. A node applying an entry it
	// originated answers its waiting client with the local result. ReqID 0:
	// an entry the primary made itself (lease expiry, auto compaction).
	Origin uint64
	ReqID  uint64
	// Time is the primary's wall clock at append (unix ns), for log
	// retention by age.
	Time int64
	// Solo marks an entry the leader logged while acknowledging alone. A
	// replica whose newest entry is synchronous knows its leader was
	// synchronous up to there.
	Solo bool
	// Merge marks the entry that ends a split brain: Data is then the
	// revision (MergeRev) the store jumps to and compacts at, above both
	// sides' maxima.
	Merge bool
	// Rev is the store's revision after the entry was applied. Both nodes
	// derive it; the replica checks it against the leader's. The split
	// brain export finds the revision at the point of divergence with it.
	Rev int64
	// Data is the marshalled etcdserverpb.InternalRaftRequest (or the
	// merge revision).
	Data []byte
}

// Entry flag bits (one byte in the encoding).
const (
	entrySolo  = 1
	entryMerge = 2
)

// MergeData is the Data of a merge entry to revision rev.
func MergeData(rev int64) []byte { return binary.AppendVarint(nil, rev) }

// MergeRev returns the revision of a merge entry.
func (e *Entry) MergeRev() (int64, error) {
	v, n := binary.Varint(e.Data)
	if n <= 0 || n != len(e.Data) {
		return 0, ErrDecode
	}
	return v, nil
}

// ErrDecode reports a malformed entry or message.
var ErrDecode = errors.New("repl: malformed data")

// entryHeaderMax bounds the encoding of an entry's fields other than
// Data: six varints, two 8-byte node IDs and the flags byte.
const entryHeaderMax = 6*binary.MaxVarintLen64 + 2*8 + 1

// AppendEntry appends e's encoding to b. It grows b at most once: every
// write is encoded like this into the log and the journal on both nodes,
// most often into a nil b.
func AppendEntry(b []byte, e *Entry) []byte {
	if n := entryHeaderMax + len(e.Data); cap(b)-len(b) < n {
		nb := make([]byte, len(b), len(b)+n)
		copy(nb, b)
		b = nb
	}
	b = binary.AppendUvarint(b, e.Index)
	b = binary.AppendUvarint(b, e.Epoch.Term)
	b = binary.BigEndian.AppendUint64(b, e.Epoch.Node)
	b = binary.BigEndian.AppendUint64(b, e.Origin)
	b = binary.AppendUvarint(b, e.ReqID)
	b = binary.AppendVarint(b, e.Time)
	b = binary.AppendVarint(b, e.Rev)
	var flags byte
	if e.Solo {
		flags |= entrySolo
	}
	if e.Merge {
		flags |= entryMerge
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(e.Data)))
	return append(b, e.Data...)
}

// decoder reads the fields of an encoding in order; the first failure
// sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = ErrDecode
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = ErrDecode
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) u64() uint64 {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 8 {
		d.err = ErrDecode
		return 0
	}
	v := binary.BigEndian.Uint64(d.b)
	d.b = d.b[8:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) < 1 {
		d.err = ErrDecode
		return 0
	}
	v := d.b[0]
	d.b = d.b[1:]
	return v
}

// bytes returns a length-prefixed field; it aliases the input.
func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if uint64(len(d.b)) < n {
		d.err = ErrDecode
		return nil
	}
	v := d.b[:n:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) entry(e *Entry) {
	e.Index = d.uvarint()
	e.Epoch.Term = d.uvarint()
	e.Epoch.Node = d.u64()
	e.Origin = d.u64()
	e.ReqID = d.uvarint()
	e.Time = d.varint()
	e.Rev = d.varint()
	flags := d.byte()
	e.Solo, e.Merge = flags&entrySolo != 0, flags&entryMerge != 0
	e.Data = d.bytes()
}

// DecodeEntry decodes one entry; e.Data aliases b.
func DecodeEntry(b []byte) (Entry, error) {
	var e Entry
	d := decoder{b: b}
	d.entry(&e)
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrDecode
	}
	return e, d.err
}

// EncodeEntries encodes a run of consecutive entries (one Log or Catchup
// message).
func EncodeEntries(es []Entry) []byte {
	n := 0
	for i := range es {
		n += len(es[i].Data) + entryHeaderMax
	}
	b := make([]byte, 0, n+binary.MaxVarintLen64)
	b = binary.AppendUvarint(b, uint64(len(es)))
	for i := range es {
		b = AppendEntry(b, &es[i])
	}
	return b
}

// DecodeEntries decodes EncodeEntries' output and checks that the indexes
// are consecutive. The entries' Data alias b.
func DecodeEntries(b []byte) ([]Entry, error) {
	d := decoder{b: b}
	n := d.uvarint()
	if d.err != nil || n > uint64(len(b)) {
		return nil, ErrDecode
	}
	es := make([]Entry, n)
	for i := range es {
		d.entry(&es[i])
		if d.err == nil && i > 0 && es[i].Index != es[i-1].Index+1 {
			d.err = fmt.Errorf("%w: entries not consecutive (%d after %d)", ErrDecode, es[i].Index, es[i-1].Index)
		}
	}
	if d.err == nil && len(d.b) != 0 {
		d.err = ErrDecode
	}
	return es, d.err
}
