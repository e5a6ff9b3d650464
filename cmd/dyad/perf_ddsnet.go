package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dyad-db/dyad/internal/ddsnet"
	"github.com/dyad-db/dyad/internal/perf"
	"github.com/dyad-db/dyad/internal/transport"
)

// The replication path: ddsnet (the transport replication uses) with its
// handler feeding an owner goroutine through a channel, as the replication
// loop is fed. A ping is a Log message, the pong an Ack, as an entry and its
// acknowledgement travel.
const (
	perfNetCluster  = 0xd1ad
	perfNetPingKind = 1
	perfNetPongKind = 2
)

func perfNet(j perfJob, node uint64) (*ddsnet.Net, <-chan *transport.Message, error) {
	n, err := ddsnet.New(ddsnet.Config{DDS: j.config(), Cluster: perfNetCluster, Node: node, Prefix: "dyadperf"})
	if err != nil {
		return nil, nil, err
	}
	// The handler only queues; the owner goroutine (the caller) does the
	// work, so the receive thread never blocks on the protocol.
	in := make(chan *transport.Message, 1024)
	if err := n.Start(func(m *transport.Message) { in <- m }); err != nil {
		n.Close()
		return nil, nil, err
	}
	return n, in, nil
}

// perfNetRespond answers every ping with a pong carrying the same payload
// until ctx ends.
func perfNetRespond(ctx context.Context, j perfJob, ready func()) error {
	n, in, err := perfNet(j, 2)
	if err != nil {
		return err
	}
	defer n.Close()
	ready()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-in:
			if m.Kind != perfNetPingKind {
				continue
			}
			err := n.Send(&transport.Message{Class: transport.Ack, Kind: perfNetPongKind, Index: m.Index, Payload: m.Payload})
			if err != nil && !errors.Is(err, transport.ErrTimeout) {
				return err
			}
		}
	}
}

// perfNetPing measures j.Count round trips per size.
func perfNetPing(ctx context.Context, j perfJob, emit func(perf.Row) error) error {
	n, in, err := perfNet(j, 1)
	if err != nil {
		return err
	}
	defer n.Close()
	var seq uint64
	// roundTrip sends ping seq and waits for its pong (older pongs, e.g.
	// answers to repeated warm-up pings, are skipped).
	roundTrip := func(payload []byte, timeout time.Duration) (bool, error) {
		seq++
		if err := n.Send(&transport.Message{Class: transport.Log, Kind: perfNetPingKind, Index: seq, Payload: payload}); err != nil {
			return false, err
		}
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		for {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-tm.C:
				return false, nil
			case m := <-in:
				if m.Kind == perfNetPongKind && m.Index == seq {
					return true, nil
				}
			}
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for ok := false; !ok; {
		if time.Now().After(deadline) {
			return errors.New("perf: ddsnet peer not answering")
		}
		if ok, err = roundTrip(nil, 200*time.Millisecond); err != nil {
			return err
		}
	}
	for _, sz := range j.Sizes {
		payload := make([]byte, sz)
		d := make([]time.Duration, 0, j.Count)
		for range j.Count {
			t := time.Now()
			ok, err := roundTrip(payload, 10*time.Second)
			if err != nil {
				return err
			}
			if !ok {
				return fmt.Errorf("perf: ddsnet pong lost at size %d", sz)
			}
			d = append(d, time.Since(t))
		}
		if err := emit(perf.Row{Size: sz, RTT: perf.Summarise(d)}); err != nil {
			return err
		}
	}
	return nil
}
