package server

import (
	"bytes"
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// decodeReceived is what the apply loop makes of m (onMessage): the
// driver's own kinds decoded as onMessage does, the rest as the core gets
// them.
func decodeReceived(m *transport.Message) (any, error) {
	switch m.Kind {
	case repl.KindForward:
		return repl.DecodeForward(m.Payload)
	case repl.KindReply:
		return repl.DecodeReply(m.Payload)
	}
	return decodeMessage(m)
}

// The apply loop releases a received message (transport.Message.Release)
// exactly when nothing decoded from it aliases its payload
// (keepsPayload): for every kind the node receives, the payload is
// poisoned after decoding, as ddsnet poisons a released batch in race
// builds, and the decoded message must stay as it was for a released
// kind. A kept kind must alias (else it could be released, and this table
// is stale), which also shows that the check sees aliasing.
func TestReleasedKindsDoNotAlias(t *testing.T) {
	hb := repl.Heartbeat{Role: repl.RolePrimary, Epoch: repl.Epoch{Term: 3, Node: 1}, Applied: 9, Commit: 8, Rev: 7, SentAt: 6, Echo: 5, MaxTerm: 3, EpochStart: 2, SoloFrom: 1, Run: 11, EchoRun: 12}
	reply := repl.Reply{ReqID: 4, TTL: 30, Err: repl.ReplyOK}
	creq := repl.CatchupReq{From: 10, Prev: repl.Epoch{Term: 2, Node: 2}}
	ho := repl.Handover{Epoch: repl.Epoch{Term: 3, Node: 1}, Last: 99, Final: true}
	fw := repl.Forward{Op: repl.ForwardWrite, ReqID: 5, Data: []byte("a forwarded request")}
	entries := repl.EncodeEntries([]repl.Entry{{Index: 1, Epoch: repl.Epoch{Term: 1, Node: 1}, Data: []byte("entry one")}, {Index: 2, Epoch: repl.Epoch{Term: 1, Node: 1}, Data: []byte("entry two")}})
	for _, tc := range []struct {
		name    string
		kind    uint16
		flags   uint32
		payload []byte
	}{
		{"ack", repl.KindAck, 0, nil},
		{"heartbeat", repl.KindHeartbeat, 0, hb.Encode()},
		{"reply", repl.KindReply, 0, reply.Encode()},
		{"catch-up request", repl.KindCatchupReq, 0, creq.Encode()},
		{"snapshot request", repl.KindSnapReq, 0, nil},
		{"merge request", repl.KindMergeReq, 0, repl.MergeData(42)},
		{"handover", repl.KindHandover, 0, ho.Encode()},
		{"handover ack", repl.KindHandoverAck, 0, ho.Encode()},
		{"leaving", repl.KindLeaving, 0, binary.BigEndian.AppendUint64(nil, 77)},
		{"catch-up, diverged", repl.KindCatchup, repl.FlagDiverged, repl.EncodeEpochs([]repl.EpochRecord{{Epoch: repl.Epoch{Term: 1, Node: 1}, Start: 1}})},
		{"catch-up, log gone", repl.KindCatchup, repl.FlagLogGone, nil},
		{"entries", repl.KindEntries, 0, entries},
		{"catch-up entries", repl.KindCatchup, 0, entries},
		{"snapshot chunk", repl.KindSnapChunk, 0, []byte("snapshot bytes")},
		{"forward", repl.KindForward, 0, fw.Encode()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := &transport.Message{Kind: tc.kind, Flags: tc.flags, From: 2, Payload: bytes.Clone(tc.payload)}
			got, err := decodeReceived(m)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			want, _ := decodeReceived(&transport.Message{Kind: tc.kind, Flags: tc.flags, From: 2, Payload: bytes.Clone(tc.payload)})
			for i := range m.Payload {
				m.Payload[i] = 0xdb
			}
			aliases := !reflect.DeepEqual(got, want)
			if keeps := keepsPayload(m); aliases != keeps {
				t.Errorf("keepsPayload %v, but what decodes from it aliases the payload: %v", keeps, aliases)
			}
		})
	}
}
