package repl

import (
	"bytes"
	"errors"
	"testing"
)

// The decoders read bytes from the peer (DDS samples) and from the log in
// the data file, so any input must give a value or ErrDecode-wrapped error,
// never a panic or an allocation sized by an unchecked length. Whatever
// decodes must re-encode to a fixed point: encode(decode(encode(decode(b))))
// equals encode(decode(b)), so a decoded value survives a round trip intact.

// checkFixedPoint asserts the round-trip property for one decoder.
func checkFixedPoint[T any](t *testing.T, b []byte, dec func([]byte) (T, error), enc func(T) []byte) {
	t.Helper()
	v, err := dec(b)
	if err != nil {
		if !errors.Is(err, ErrDecode) {
			t.Fatalf("error %v does not wrap ErrDecode", err)
		}
		return
	}
	once := enc(v)
	v2, err := dec(once)
	if err != nil {
		t.Fatalf("re-encoding of a decoded value does not decode: %v", err)
	}
	if twice := enc(v2); !bytes.Equal(once, twice) {
		t.Fatalf("round trip changed the value:\n once %x\ntwice %x", once, twice)
	}
}

func seedEntries() []Entry {
	return []Entry{
		{Index: 1, Epoch: Epoch{Term: 1, Node: 0xabc}, Origin: 7, ReqID: 9, Time: 1700000000, Rev: 2, Data: []byte("req")},
		{Index: 2, Epoch: Epoch{Term: 3, Node: 1}, Solo: true, Merge: true, Rev: -1, Data: MergeData(100)},
		{},
	}
}

func FuzzDecodeEntry(f *testing.F) {
	for _, e := range seedEntries() {
		f.Add(AppendEntry(nil, &e))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeEntry, func(e Entry) []byte { return AppendEntry(nil, &e) })
	})
}

func FuzzDecodeEntries(f *testing.F) {
	f.Add(EncodeEntries(seedEntries()))
	f.Add(EncodeEntries(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeEntries, EncodeEntries)
	})
}

func FuzzDecodeEpochs(f *testing.F) {
	f.Add(EncodeEpochs([]EpochRecord{{Epoch: Epoch{Term: 1, Node: 2}, Start: 1}, {Epoch: Epoch{Term: 2, Node: 3}, Start: 10, Solo: true}}))
	f.Add(EncodeEpochs(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeEpochs, EncodeEpochs)
	})
}

func FuzzDecodeHeartbeat(f *testing.F) {
	h := Heartbeat{Role: RolePrimary, Epoch: Epoch{Term: 4, Node: 5}, Applied: 10, Commit: 9, Rev: 11, SentAt: 1, Echo: 2, LedLast: true, CatchingUp: true, MaxTerm: 4, EpochStart: 3, SoloFrom: 8}
	f.Add(h.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeHeartbeat, func(h Heartbeat) []byte { return h.Encode() })
	})
}

func FuzzDecodeForward(f *testing.F) {
	for _, fw := range []Forward{{Op: ForwardWrite, ReqID: 1, Data: []byte("x")}, {Op: ForwardKeepAlive, ReqID: 2, Data: make([]byte, 8)}} {
		f.Add(fw.Encode())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeForward, func(fw Forward) []byte { return fw.Encode() })
	})
}

func FuzzDecodeReply(f *testing.F) {
	r := Reply{}
	f.Add(r.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeReply, func(r Reply) []byte { return r.Encode() })
	})
}

func FuzzDecodeHandover(f *testing.F) {
	h := Handover{}
	f.Add(h.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeHandover, func(h Handover) []byte { return h.Encode() })
	})
}

func FuzzDecodeCatchupReq(f *testing.F) {
	c := CatchupReq{From: 12, Prev: Epoch{Term: 2, Node: 9}}
	f.Add(c.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFixedPoint(t, b, DecodeCatchupReq, func(c CatchupReq) []byte { return c.Encode() })
	})
}
