package server_test

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

func refused(t *testing.T, n *node, reason string) float64 {
	t.Helper()
	return counter(t, n.cfg.Metrics.Refused.WithLabelValues(reason))
}

// waitRefused waits until n has refused want messages for reason since
// it had refused from.
func waitRefused(t *testing.T, n *node, reason string, from, want float64) {
	t.Helper()
	deadline := time.Now().Add(40 * testLease)
	for refused(t, n, reason)-from < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s refused %v messages (%s), want %v", n.cfg.Name, refused(t, n, reason)-from, reason, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// usurper is a heartbeat of a primary leading a much newer epoch: a
// primary that heard it would step down at once.
func usurper(from uint64) []byte {
	hb := repl.Heartbeat{Role: repl.RolePrimary, Epoch: repl.Epoch{Term: 1 << 20, Node: from}, MaxTerm: 1 << 20,
		Applied: 1 << 20, Commit: 1 << 20, LedLast: true, HeardAgo: 0, Run: 0x5eed, SentAt: 1}
	return hb.Encode()
}

// A primary acts on heartbeats only from its peer, addressed to it, in a
// version it speaks: a usurper's heartbeat from a third node, one from
// the peer's ID but addressed to another node, and one in a version this
// node does not speak are each dropped and counted, and the primary keeps
// its role.
func TestPairRefusesStrangersMisaddressedAndUnknownVersions(t *testing.T) {
	net := transport.NewMemNet()
	a, b := startPair(t, net, t.TempDir(), t.TempDir())
	put(t, a.cli, "k", "v")
	waitLease(t, b)
	own := repl.Supported()
	for _, tc := range []struct {
		reason string
		from   uint64
		msg    transport.Message
	}{
		{"sender", 3, transport.Message{Version: repl.ProtocolV2, To: 1}},
		{"addressee", 2, transport.Message{Version: repl.ProtocolV2, To: 7}},
		{"version", 2, transport.Message{Version: own.Max + 1, Flags: repl.ProtocolRange{Min: 1, Max: own.Max + 1}.Flags()}},
	} {
		t.Run(tc.reason, func(t *testing.T) {
			hbs := heartbeatLog(t, net, 1)
			from := refused(t, a, tc.reason)
			m := tc.msg
			m.Class, m.Kind, m.Payload = transport.Heartbeat, repl.KindHeartbeat, usurper(tc.from)
			if m.Flags == 0 {
				m.Flags = own.Flags()
			}
			if err := net.Inject(0xd1ad, tc.from, &m); err != nil {
				t.Fatal(err)
			}
			waitRefused(t, a, tc.reason, from, 1)
			hbs.holds(t, repl.RolePrimary, 2*testLease)
		})
	}
	put(t, a.cli, "k", "still the primary")
}

// A primary counts as acknowledged only what it sent: an ack, from the
// peer itself, of an index beyond the primary's log is dropped. Taken, it
// would have released the next write before the replica had it: that
// write, made once the replica cannot ack any more, must wait until the
// primary gives up on the replica and goes solo.
func TestPairRefusesAckOfUnsentEntries(t *testing.T) {
	net := transport.NewMemNet()
	a, b := startPair(t, net, t.TempDir(), t.TempDir())
	put(t, a.cli, "k", "v")
	waitLease(t, b)

	from := refused(t, a, "ack")
	if err := net.Inject(0xd1ad, 2, &transport.Message{Class: transport.Ack, Kind: repl.KindAck, Version: repl.ProtocolV2, To: 1, Index: 1 << 40}); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, a, "ack", from, 1)

	solo := counter(t, a.cfg.Metrics.SoloEntered)
	net.Block(2, 1, true)
	put(t, a.cli, "k", "after the forged ack")
	if counter(t, a.cfg.Metrics.SoloEntered) == solo {
		t.Fatal("a write the replica could not acknowledge was acknowledged by a primary that never went solo")
	}
}

// Both nodes settle on the highest version both speak, shown in
// dyad_peer_protocol_version and PairStatus. A peer that advertises no
// version this node speaks is refused: counted in
// dyad_peer_protocol_mismatch_total, reported in PairStatus, and not
// heard (the primary that lost its replica goes solo and stays so); when
// the peer speaks a common version again, the pair is synchronous again.
func TestPairNegotiatesAndRefusesProtocols(t *testing.T) {
	net := transport.NewMemNet()
	dirB := t.TempDir()
	a, b := startPair(t, net, t.TempDir(), dirB)
	own := repl.Supported()
	for _, n := range []*node{a, b} {
		waitProtocol(t, n, own.Max)
		if st := n.srv.PairStatus(); st.Protocols != own.String() || st.ProtocolRefused != "" {
			t.Fatalf("%s: status %+v, want protocols %v, none refused", n.cfg.Name, st, own)
		}
	}

	b.stop()
	waitRole(t, a, repl.RoleSolo)
	// The replica comes back as a build that speaks only versions above
	// this one's: its heartbeats, as such a build sends them.
	next := repl.ProtocolRange{Min: own.Max + 1, Max: own.Max + 2}
	hb := repl.Heartbeat{Role: repl.RoleWaiting, Epoch: repl.Epoch{Term: 1, Node: 2}, HeardAgo: -1, Run: 0xabc, SentAt: 1}
	mismatch := counter(t, a.cfg.Metrics.ProtocolMismatch)
	for i := 0; i < 3; i++ {
		hb.SentAt++
		m := &transport.Message{Class: transport.Heartbeat, Kind: repl.KindHeartbeat, Version: next.Min, Flags: next.Flags(), Payload: hb.Encode()}
		if err := net.Inject(0xd1ad, 2, m); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(40 * testLease)
	for counter(t, a.cfg.Metrics.ProtocolMismatch)-mismatch < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("a refused %v of 3 heartbeats without a common version", counter(t, a.cfg.Metrics.ProtocolMismatch)-mismatch)
		}
		time.Sleep(5 * time.Millisecond)
	}
	st := a.srv.PairStatus()
	if st.ProtocolRefused == "" || st.Protocol != 0 || a.srv.Role() != repl.RoleSolo {
		t.Fatalf("after refusing its peer a reports %+v in role %s; want a refusal, no version, solo", st, a.srv.Role())
	}
	if v := gauge(t, a.cfg.Metrics.PeerProtocol); v != 0 {
		t.Fatalf("dyad_peer_protocol_version = %v while refusing the peer, want 0", v)
	}

	// The replica is back as this build: synchronous again.
	b = pairNode(t, net, dirB, 2, false)
	waitRole(t, a, repl.RolePrimary)
	waitProtocol(t, a, own.Max)
	if st := a.srv.PairStatus(); st.ProtocolRefused != "" {
		t.Fatalf("a still refuses its peer: %q", st.ProtocolRefused)
	}
	put(t, a.cli, "k", "synchronous again")
	waitLease(t, b)
}

// A node configured with a minimum above what its peer speaks refuses
// that peer; the peer, which speaks the minimum too, settles on it.
func TestPairMinimumProtocol(t *testing.T) {
	own := repl.Supported()
	if own.Min == own.Max {
		t.Skip("this build speaks one version")
	}
	net := transport.NewMemNet()
	raise := func(c *server.ReplConfig) { c.MinProtocol = own.Max }
	a := pairNodeWith(t, net, t.TempDir(), 1, true, raise)
	b := pairNode(t, net, t.TempDir(), 2, false)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	waitProtocol(t, a, own.Max)
	waitProtocol(t, b, own.Max)
	if st := a.srv.PairStatus(); st.Protocols != (repl.ProtocolRange{Min: own.Max, Max: own.Max}).String() {
		t.Fatalf("a speaks %s, want only %d", st.Protocols, own.Max)
	}
	put(t, a.cli, "k", "v")
}

func waitProtocol(t *testing.T, n *node, want uint16) {
	t.Helper()
	deadline := time.Now().Add(40 * testLease)
	for gauge(t, n.cfg.Metrics.PeerProtocol) != float64(want) || n.srv.PairStatus().Protocol != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s speaks protocol %v (status %+v), want %d", n.cfg.Name, gauge(t, n.cfg.Metrics.PeerProtocol), n.srv.PairStatus(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func gauge(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
