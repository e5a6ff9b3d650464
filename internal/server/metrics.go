package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the node's Prometheus series. Names follow etcd's wherever the
// meaning is the same, so that existing etcd alerts and dashboards work.
type Metrics struct {
	HasLeader        prometheus.Gauge
	IsLeader         prometheus.Gauge
	LeaderChanges    prometheus.Counter
	ProposalsApplied prometheus.Counter
	ProposalsFailed  prometheus.Counter
	ProposalsPending prometheus.Gauge
	FsyncDuration    prometheus.Histogram
	CommitDuration   prometheus.Histogram
	DBSize           prometheus.Gauge
	DBSizeInUse      prometheus.Gauge
	QuotaBytes       prometheus.Gauge
	Keys             prometheus.Gauge
	Revision         prometheus.Gauge
	CompactRevision  prometheus.Gauge
	Puts             prometheus.Counter
	Deletes          prometheus.Counter
	Txns             prometheus.Counter
	Ranges           prometheus.Counter
	Leases           prometheus.Gauge
	BatchSize        prometheus.Histogram
	// WatchUnsynced counts watchers that fell behind the head (their
	// stream's buffer was full) and went to catch up from history; etcd
	// shows the same condition as etcd_debugging_mvcc_slow_watcher_total.
	WatchUnsynced prometheus.Counter
	// JournalSwitches counts the journals started because the last one
	// outgrew its bound (boundJournal).
	JournalSwitches prometheus.Counter

	// Two-zone replication.
	Role           prometheus.Gauge
	Epoch          prometheus.Gauge
	CommitIndex    prometheus.Gauge
	AppliedIndex   prometheus.Gauge
	LagRevisions   prometheus.Gauge
	LagSeconds     prometheus.Histogram
	PeerAlive      prometheus.Gauge
	SoloSeconds    prometheus.Counter
	SoloEntered    prometheus.Counter
	Failovers      prometheus.Counter
	FalseFailovers prometheus.Counter
	SplitBrains    prometheus.Counter
	ResyncBytes    prometheus.Counter
	ConflictKeys   prometheus.Counter
	// SnapshotsInstalled counts the leader's snapshots this node installed;
	// StaleAnswers the catch-up and snapshot answers it ignored because
	// they did not answer its outstanding request.
	SnapshotsInstalled prometheus.Counter
	StaleAnswers       prometheus.Counter
	// SuffixesDropped counts the never-acknowledged log suffixes this node
	// dropped in place (without a snapshot) on rejoining.
	SuffixesDropped prometheus.Counter
	// Ticks counts the apply loop's replication ticks (heartbeat sent,
	// role rules evaluated; every --peer-lease/8 while the loop runs): a
	// stalled loop shows as a counter that stops, and a test can wait for
	// a node to have run its rules for a given time of its own.
	Ticks prometheus.Counter

	// The link to the peer, in etcd's peer series (label To or From: the
	// peer's member ID in hex). PeerRoundTrip is the replication round
	// trip (entries published to their ack; see observeAckRoundTrip).
	PeerRoundTrip     *prometheus.HistogramVec
	PeerSentBytes     *prometheus.CounterVec
	PeerReceivedBytes *prometheus.CounterVec
	PeerSentFailures  *prometheus.CounterVec

	// Refused counts received replication messages the core's Admit
	// dropped, by reason (repl.Refusal); ProtocolMismatch the peer's
	// heartbeats refused because the two nodes share no protocol version;
	// PeerProtocol is the version the pair speaks (0: none yet, or
	// refused).
	Refused          *prometheus.CounterVec
	ProtocolMismatch prometheus.Counter
	PeerProtocol     prometheus.Gauge
}

// NewMetrics creates the series and registers them on reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	durBuckets := prometheus.ExponentialBuckets(0.001, 2, 14)
	m := &Metrics{
		HasLeader:        prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_server_has_leader", Help: "Whether or not a leader (dyad: a primary) exists. 1 is existence, 0 is not."}),
		IsLeader:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_server_is_leader", Help: "Whether or not this member is the leader (dyad: the primary). 1 if is, 0 otherwise."}),
		LeaderChanges:    prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_leader_changes_seen_total", Help: "The number of leader (dyad: primary) changes seen."}),
		ProposalsApplied: prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_proposals_applied_total", Help: "The total number of log entries applied."}),
		ProposalsFailed:  prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_server_proposals_failed_total", Help: "The total number of failed proposals seen."}),
		ProposalsPending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_server_proposals_pending", Help: "The current number of pending proposals to commit."}),
		FsyncDuration:    prometheus.NewHistogram(prometheus.HistogramOpts{Name: "etcd_disk_wal_fsync_duration_seconds", Help: "The latency distributions of fsync called by WAL (dyad: the journal's, one per group commit).", Buckets: durBuckets}),
		JournalSwitches:  prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_journal_switches_total", Help: "Journals (member/dyad-wal) started because the last one outgrew its bound: each commits the data file inline on the write path."}),
		CommitDuration:   prometheus.NewHistogram(prometheus.HistogramOpts{Name: "etcd_disk_backend_commit_duration_seconds", Help: "The latency distributions of commit called by backend.", Buckets: durBuckets}),
		DBSize:           prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_mvcc_db_total_size_in_bytes", Help: "Total size of the underlying database physically allocated in bytes."}),
		DBSizeInUse:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_mvcc_db_total_size_in_use_in_bytes", Help: "Total size of the underlying database logically in use in bytes."}),
		QuotaBytes:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_server_quota_backend_bytes", Help: "Current backend storage quota size in bytes."}),
		Keys:             prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_debugging_mvcc_keys_total", Help: "Total number of keys."}),
		Revision:         prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_mvcc_current_revision", Help: "The current revision of store."}),
		CompactRevision:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "etcd_mvcc_compact_revision", Help: "The revision of the last compaction in store."}),
		Puts:             prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_mvcc_put_total", Help: "Total number of puts seen by this member."}),
		Deletes:          prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_mvcc_delete_total", Help: "Total number of deletes seen by this member."}),
		Txns:             prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_mvcc_txn_total", Help: "Total number of txns seen by this member."}),
		Ranges:           prometheus.NewCounter(prometheus.CounterOpts{Name: "etcd_mvcc_range_total", Help: "Total number of ranges seen by this member."}),
		Leases:           prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_leases", Help: "Number of leases."}),
		BatchSize:        prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dyad_apply_batch_entries", Help: "Log entries per group commit.", Buckets: prometheus.ExponentialBuckets(1, 2, 11)}),
		WatchUnsynced:    prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_watch_unsynced_total", Help: "Times a watcher fell behind the newest revision (its stream's buffer was full) and went to catch up from history."}),

		Role:           prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_role", Help: "Replication role: 0 waiting, 1 replica, 2 primary (synchronous), 3 solo (leading alone)."}),
		Epoch:          prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_epoch_term", Help: "Term of the current epoch."}),
		CommitIndex:    prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_commit_index", Help: "Last log index known committed."}),
		AppliedIndex:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_applied_index", Help: "Last log index applied and durable on this node."}),
		LagRevisions:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_replication_lag_revisions", Help: "Revisions the peer is behind this node (primary) or this node is behind the primary (replica), from the newest heartbeat."}),
		LagSeconds:     prometheus.NewHistogram(prometheus.HistogramOpts{Name: "dyad_replication_ack_seconds", Help: "Time from local commit to the replica's acknowledgement, per batch.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}),
		PeerAlive:      prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_peer_alive", Help: "1 while the peer's heartbeats arrive within the peer lease."}),
		SoloSeconds:    prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_solo_seconds_total", Help: "Time spent leading alone (acknowledging without the peer)."}),
		SoloEntered:    prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_solo_entered_total", Help: "Times the primary went solo after losing its replica."}),
		Failovers:      prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_failovers_total", Help: "Times this node promoted itself after losing its primary."}),
		FalseFailovers: prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_false_failovers_total", Help: "Times this node, leading and running without a freeze for the last few leases, found that its peer had taken over: the peer judged a live primary dead (a partition, or timeouts under load)."}),
		SplitBrains:    prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_split_brains_total", Help: "Split brains this node lost: it had acknowledged writes alone that the winning history lacks (kept as conflict records)."}),
		ResyncBytes:    prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_resync_bytes_total", Help: "Bytes sent to catch the peer up."}),
		ConflictKeys:   prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_conflict_keys_total", Help: "Keys this node kept as conflict records after losing a split brain (see dyad resolve)."}),

		SnapshotsInstalled: prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_snapshots_installed_total", Help: "Snapshots of the leader's data file this node installed to resync."}),
		StaleAnswers:       prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_stale_catchup_answers_total", Help: "Catch-up answers and snapshot chunks ignored because they did not answer this node's outstanding request (late, duplicate or unrequested)."}),
		SuffixesDropped:    prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_suffixes_dropped_total", Help: "Log suffixes that were never acknowledged (a primary's last writes before it died) this node dropped in place on rejoining, instead of resyncing from a snapshot."}),
		Ticks:              prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_replication_ticks_total", Help: "Replication ticks of the apply loop (a heartbeat sent and the role rules evaluated, every peer lease / 8)."}),

		// etcd's buckets for the round trip (0.1 ms to 3.3 s).
		PeerRoundTrip:     prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "etcd_network_peer_round_trip_time_seconds", Help: "Round-trip time histogram between peers (dyad: from publishing log entries to the peer's acknowledgement that they are durable there).", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16)}, []string{"To"}),
		PeerSentBytes:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "etcd_network_peer_sent_bytes_total", Help: "The total number of bytes sent to peers (dyad: replication messages handed to DDS, payload and envelope)."}, []string{"To"}),
		PeerReceivedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "etcd_network_peer_received_bytes_total", Help: "The total number of bytes received from peers (dyad: replication messages delivered by DDS, payload and envelope)."}, []string{"From"}),
		PeerSentFailures:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "etcd_network_peer_sent_failures_total", Help: "The total number of send failures to peers (dyad: replication messages DDS refused, e.g. back-pressure past the write timeout)."}, []string{"To"}),

		Refused:          prometheus.NewCounterVec(prometheus.CounterOpts{Name: "dyad_replication_refused_messages_total", Help: "Received replication messages dropped unread: addressed to another node (addressee), from a node other than the peer (sender), in a protocol version this node does not speak (version), or acknowledging entries this node never sent (ack)."}, []string{"reason"}),
		ProtocolMismatch: prometheus.NewCounter(prometheus.CounterOpts{Name: "dyad_peer_protocol_mismatch_total", Help: "Heartbeats of the peer refused because the two nodes share no protocol version (see dyad status and docs/OPERATIONS.md, version skew)."}),
		PeerProtocol:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "dyad_peer_protocol_version", Help: "The replication protocol version the pair speaks: the highest both nodes speak (0: the peer is not heard yet, or refused)."}),
	}
	for _, why := range refusalReasons() {
		m.Refused.WithLabelValues(why) // every reason's series exists from the start, at 0
	}
	if reg != nil {
		reg.MustRegister(m.Role, m.Epoch, m.CommitIndex, m.AppliedIndex, m.LagRevisions, m.LagSeconds, m.PeerAlive,
			m.SoloSeconds, m.SoloEntered, m.Failovers, m.FalseFailovers, m.SplitBrains, m.ResyncBytes, m.ConflictKeys, m.SnapshotsInstalled, m.StaleAnswers, m.SuffixesDropped, m.Ticks,
			m.PeerRoundTrip, m.PeerSentBytes, m.PeerReceivedBytes, m.PeerSentFailures, m.Refused, m.ProtocolMismatch, m.PeerProtocol)
		reg.MustRegister(m.HasLeader, m.IsLeader, m.LeaderChanges, m.ProposalsApplied, m.ProposalsFailed,
			m.ProposalsPending, m.FsyncDuration, m.CommitDuration, m.DBSize, m.DBSizeInUse, m.QuotaBytes,
			m.Keys, m.Revision, m.CompactRevision, m.Puts, m.Deletes, m.Txns, m.Ranges, m.Leases, m.BatchSize, m.WatchUnsynced, m.JournalSwitches)
	}
	return m
}
