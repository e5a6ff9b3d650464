package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/dyad-db/dyad/internal/repl"
)

// PairStatus is what `dyad status` shows of a node beyond etcd's Status.
type PairStatus struct {
	// Role: "waiting", "replica", "primary", "solo", or "single" for a
	// node configured without a peer.
	Role string
	// Sync: the pair replicates synchronously as seen from this node: a
	// primary whose replica acknowledges, or a replica following a primary
	// it hears. A solo primary, a waiting node and a single node are not.
	Sync bool
	// PeerAlive: the peer's heartbeats arrive within the peer lease.
	PeerAlive bool
	// LagRevisions: revisions the peer is behind (primary) or this node is
	// behind its primary (replica), from the newest heartbeat.
	LagRevisions int64
	// PeerRoundTrip is the newest replication round trip this node timed
	// (a primary: entries published to their ack), RoundTripAge how long
	// ago; both 0 when it has timed none since it started.
	PeerRoundTrip time.Duration
	RoundTripAge  time.Duration
	// Protocols is the range of replication protocol versions this node
	// speaks ("1..2"); Protocol the version the pair speaks (0: none
	// yet); ProtocolRefused why the peer is refused ("": it is not).
	Protocols       string
	Protocol        uint16
	ProtocolRefused string
}

// PairStatus reports the node's replication state. Lag and liveness are
// the values the apply loop last published on its gauges (every tick), so
// that they agree with /metrics.
func (s *Server) PairStatus() PairStatus {
	if s.repl == nil {
		return PairStatus{Role: "single"}
	}
	role := s.Role()
	st := PairStatus{
		Role:         role.String(),
		PeerAlive:    gaugeValue(s.m.PeerAlive) == 1,
		LagRevisions: int64(gaugeValue(s.m.LagRevisions)),
	}
	st.Protocols, st.Protocol, st.ProtocolRefused = s.protocolStatus()
	st.Sync = st.PeerAlive && (role == repl.RolePrimary || role == repl.RoleReplica && s.HasLeader())
	if at := s.rttAt.Load(); at != 0 {
		st.PeerRoundTrip = time.Duration(s.rtt.Load())
		st.RoundTripAge = time.Duration(s.repl.clock.Now() - at)
	}
	return st
}

func gaugeValue(g prometheus.Gauge) float64 {
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		return 0
	}
	return m.GetGauge().GetValue()
}
