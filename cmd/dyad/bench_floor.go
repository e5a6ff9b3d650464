package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dyad-db/dyad/internal/bench/floor"
	"github.com/dyad-db/dyad/internal/bench/netns"
	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/bench/workload"
	"github.com/dyad-db/dyad/internal/perf"
)

// floorDomain is the DDS domain of the floor's round trips; the zones'
// namespaces are private to one measurement, so no other participant
// shares it.
const floorDomain = 7

// floorMethod names the round trip the floor counts, for the report.
const floorMethod = "dyad perf's ddsnet+ws+batch ping-pong: a Log message answered by an Ack over internal/ddsnet, " +
	"each end waiting in a waitset with write batching on, as the replication loop runs, as a batch and its acknowledgement travel between the zones"

// floorRoundTrip measures DDS round trips between zone a and zone b of a
// pair of namespaces with `dyad perf`'s ddsnet path, run by bin (the
// binary the dyad targets run): a responder child in zone a and a pinger
// in zone b, bound to the replication veth as dyad-pair's nodes are.
//
// Why ddsnet and not ddsperf: the pair's write crosses the zones as a
// ddsnet Log message and comes back as an Ack, each handed to an owner
// goroutine, over the same binding and Cyclone configuration; ddsperf
// answers on Cyclone's own receive thread in C, a path no dyad write
// takes, so it would put the floor below what the pair's transport can
// reach. Both ends run as `dyad serve` runs its loop: waiting in a waitset
// (--dds-waitset, on by default) with Cyclone's write batching on. The
// notified path (Cyclone's receive thread waking an owner goroutine) took
// about 2.7 times ddsperf's round trip on this machine kind against 1.1
// times for this one, and would put the floor above what the pair pays.
func floorRoundTrip(bin string) floor.RoundTrip {
	return func(ctx context.Context, np *netns.Pair, size, count int) (report.Dist, error) {
		pair := &perf.Pair{NsA: np.Namespace(0), NsB: np.Namespace(1)}
		a := perfJob{Domain: floorDomain, Iface: netns.ReplIface, Peer: np.ReplIP(1), Net: true, WaitSet: true, WriteBatch: true}
		b := perfJob{Domain: floorDomain, Iface: netns.ReplIface, Peer: np.ReplIP(0), Net: true, WaitSet: true, WriteBatch: true,
			Sizes: []int{size}, Count: count}
		// Start-up and discovery take seconds; then count round trips of
		// at most the delay both ways plus 10 ms each on a loaded machine.
		limit := 60*time.Second + time.Duration(count)*(2*np.Delay()+10*time.Millisecond)
		pctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		rows, err := perfPath(pctx, bin, pair, a, b, false)
		if err != nil {
			return report.Dist{}, err
		}
		if len(rows) != 1 || rows[0].RTT.Count == 0 {
			return report.Dist{}, fmt.Errorf("the pinger reported %d rows, want one with round trips", len(rows))
		}
		r := rows[0].RTT
		return report.Dist{N: r.Count, P50: r.P50, P90: r.P90, P99: r.P99, Max: r.Max}, nil
	}
}

// floorReference measures ddsperf's round trip in the same namespaces,
// with the same Cyclone configuration as floorRoundTrip's ends: Cyclone's
// own ping-pong in C, the transport with nothing of dyad's on top, shown
// beside the floor for comparison.
func floorReference(ddsperf string) floor.RoundTrip {
	return func(ctx context.Context, np *netns.Pair, size, _ int) (report.Dist, error) {
		pair := &perf.Pair{NsA: np.Namespace(0), NsB: np.Namespace(1)}
		a := perfJob{Domain: floorDomain, Iface: netns.ReplIface, Peer: np.ReplIP(1)}
		b := perfJob{Domain: floorDomain, Iface: netns.ReplIface, Peer: np.ReplIP(0)}
		d := perf.Ddsperf{Bin: ddsperf, Pair: pair, Domain: floorDomain, XMLA: a.config().XML(), XMLB: b.config().XML()}
		r, err := d.Ping(ctx, size, 2*time.Second)
		if err != nil {
			return report.Dist{}, err
		}
		return report.Dist{N: r.Count, P50: r.P50, P90: r.P90, P99: r.P99, Max: r.Max}, nil
	}
}

// floorLayouts are the zone layouts whose round trip the floor needs: the
// layout of every target (dyad-pair's veth, or the shaper for a target
// named <system>@<delay>) when the run measures puts, and the delay
// profile's delays when it runs on dyad-pair or etcd-3. Each once, in
// that order.
func floorLayouts(targets []string, ops []workload.Op, delayProfile bool, delays []time.Duration) []floor.Layout {
	var out []floor.Layout
	add := func(l floor.Layout) {
		if !slices.Contains(out, l) {
			out = append(out, l)
		}
	}
	if slices.Contains(ops, workload.Put) {
		for _, t := range targets {
			add(floor.LayoutOf(t))
		}
	}
	if delayProfile && (slices.Contains(targets, "dyad-pair") || slices.Contains(targets, "etcd-3")) {
		for _, d := range delays {
			add(floor.Shaped(d))
		}
	}
	return out
}
