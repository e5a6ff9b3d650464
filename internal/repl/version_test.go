package repl

import "testing"

func TestNegotiate(t *testing.T) {
	for _, tc := range []struct {
		own, peer ProtocolRange
		want      uint16
		ok        bool
	}{
		{ProtocolRange{1, 2}, ProtocolRange{1, 1}, 1, true}, // a peer from before versions
		{ProtocolRange{1, 2}, ProtocolRange{1, 2}, 2, true},
		{ProtocolRange{1, 2}, ProtocolRange{1, 3}, 2, true}, // the next version waits for both
		{ProtocolRange{1, 3}, ProtocolRange{1, 3}, 3, true},
		{ProtocolRange{3, 3}, ProtocolRange{1, 2}, 0, false}, // minimum above the peer's maximum
		{ProtocolRange{1, 2}, ProtocolRange{3, 4}, 0, false},
		{ProtocolRange{1, 2}, ProtocolRange{2, 1}, 0, false}, // not a range
		{ProtocolRange{1, 2}, ProtocolRange{0, 2}, 0, false},
	} {
		v, ok := Negotiate(tc.own, tc.peer)
		if v != tc.want || ok != tc.ok {
			t.Errorf("Negotiate(%v, %v) = %d, %v; want %d, %v", tc.own, tc.peer, v, ok, tc.want, tc.ok)
		}
		if v2, ok2 := Negotiate(tc.peer, tc.own); v2 != v || ok2 != ok {
			t.Errorf("Negotiate is not symmetric for %v and %v", tc.own, tc.peer)
		}
	}
}

func TestHeartbeatProtocols(t *testing.T) {
	if got := HeartbeatProtocols(0); got != (ProtocolRange{ProtocolV1, ProtocolV1}) {
		t.Errorf("flags 0 (a sender before versions) read as %v", got)
	}
	for _, r := range []ProtocolRange{{1, 2}, {2, 3}, {1, 65535}, {65535, 65535}} {
		if got := HeartbeatProtocols(r.Flags()); got != r {
			t.Errorf("%v travelled as %v", r, got)
		}
	}
	if s := Supported(); !s.Valid() || s.Min != ProtocolV1 || s.Max < ProtocolV3 {
		t.Errorf("this build speaks %v", s)
	}
}
