package server_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// TestPairPeerSeries: a replicated write shows up in etcd's peer series on
// both nodes, under the other node's member ID: bytes sent by the primary
// To the replica, bytes received by the replica From the primary, and one
// round trip per acknowledged batch on the primary.
func TestPairPeerSeries(t *testing.T) {
	net := transport.NewMemNet()
	a := pairNode(t, net, t.TempDir(), 0xa, true)
	b := pairNode(t, net, t.TempDir(), 0xb, false)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)

	// Once the peer is heard its failure series exists, at zero.
	if n := promtest.CollectAndCount(a.cfg.Metrics.PeerSentFailures); n != 1 {
		t.Errorf("primary has %d sent_failures series, want one (To=b, at zero)", n)
	}
	if v := promtest.ToFloat64(a.cfg.Metrics.PeerSentFailures.WithLabelValues("b")); v != 0 {
		t.Errorf("sent_failures{To=b} = %v on a healthy link", v)
	}
	sentBefore := promtest.ToFloat64(a.cfg.Metrics.PeerSentBytes.WithLabelValues("b"))
	recvBefore := promtest.ToFloat64(b.cfg.Metrics.PeerReceivedBytes.WithLabelValues("a"))
	put(t, a.cli, "k", "a value of some length")

	if sent := promtest.ToFloat64(a.cfg.Metrics.PeerSentBytes.WithLabelValues("b")); sent <= sentBefore+float64(len("a value of some length")) {
		t.Errorf("primary sent_bytes{To=b} went from %v to %v, want at least the value's length more", sentBefore, sent)
	}
	if recv := promtest.ToFloat64(b.cfg.Metrics.PeerReceivedBytes.WithLabelValues("a")); recv <= recvBefore+float64(len("a value of some length")) {
		t.Errorf("replica received_bytes{From=a} went from %v to %v, want at least the value's length more", recvBefore, recv)
	}
	// The put was acknowledged by the replica, so the primary timed at
	// least one round trip to it.
	if n := promtest.CollectAndCount(a.cfg.Metrics.PeerRoundTrip, "etcd_network_peer_round_trip_time_seconds"); n != 1 {
		t.Fatalf("primary has %d round-trip series, want one (To=b)", n)
	}
	if got := histogramCount(t, a.cfg.Metrics.PeerRoundTrip.WithLabelValues("b")); got == 0 {
		t.Error("primary observed no round trip to b after an acknowledged write")
	}
	// The replica acknowledges; it times no round trip of its own.
	if n := promtest.CollectAndCount(b.cfg.Metrics.PeerRoundTrip); n != 0 {
		t.Errorf("replica has %d round-trip series, want none", n)
	}
}

// histogramCount is the number of observations in one histogram series.
func histogramCount(t *testing.T, o prometheus.Observer) uint64 {
	t.Helper()
	var m dto.Metric
	if err := o.(prometheus.Metric).Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}
