package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/dyad-db/dyad/internal/ddsnet"
	"github.com/dyad-db/dyad/internal/perf"
	"github.com/dyad-db/dyad/internal/transport"
)

// The replication path: ddsnet (the transport replication uses) signalling
// an owner goroutine, which takes the waiting batches into a bounded queue
// (Resume) on every turn, exactly as the replication loop is fed
// (internal/server/inbox.go). A ping is a Log
// message, the pong an Ack, as an entry and its acknowledgement travel.
const (
	perfNetCluster  = 0xd1ad
	perfNetPingKind = 1
	perfNetPongKind = 2
	perfNetDataKind = 3 // throughput phase: counted, not answered
	perfNetEndKind  = 4 // throughput phase: answered with the count received
)

// perfInbox is the owner's queue, filled by ddsnet's delivery thread.
type perfInbox struct {
	net *ddsnet.Net
	mu  sync.Mutex // serialises offers' room check and sends
	ch  chan *transport.Message
}

func (q *perfInbox) offer(ms []*transport.Message) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if cap(q.ch)-len(q.ch) < len(ms) {
		return false
	}
	for _, m := range ms {
		q.ch <- m // cannot block: only the owner takes
	}
	return true
}

// next returns the next message, or nil when ctx ends or timeout passes
// (nil timeout: none). It takes what waits (Resume) before each wait and
// whenever ddsnet signals Ready, as the replication loop does.
func (q *perfInbox) next(ctx context.Context, timeout <-chan time.Time) *transport.Message {
	for {
		q.net.Resume()
		select {
		case m := <-q.ch:
			return m
		default:
		}
		select {
		case m := <-q.ch:
			return m
		case <-q.net.Ready():
			continue
		case <-ctx.Done():
		case <-timeout:
		}
		return nil
	}
}

func perfNet(j perfJob, node uint64) (*ddsnet.Net, *perfInbox, error) {
	n, err := ddsnet.New(ddsnet.Config{DDS: j.config(), Cluster: perfNetCluster, Node: node, Prefix: "dyadperf"})
	if err != nil {
		return nil, nil, err
	}
	q := &perfInbox{net: n, ch: make(chan *transport.Message, 4096)}
	if err := n.StartBatch(q.offer); err != nil {
		n.Close()
		return nil, nil, err
	}
	return n, q, nil
}

// perfNetRespond answers every ping with a pong carrying the same payload,
// and every throughput end marker with the number of data messages
// received since the previous one, until ctx ends.
func perfNetRespond(ctx context.Context, j perfJob, ready func()) error {
	n, in, err := perfNet(j, 2)
	if err != nil {
		return err
	}
	defer n.Close()
	ready()
	var data uint64
	for {
		m := in.next(ctx, nil)
		if m == nil {
			return nil
		}
		var reply *transport.Message
		switch m.Kind {
		case perfNetPingKind:
			reply = &transport.Message{Class: transport.Ack, Kind: perfNetPongKind, Index: m.Index, Payload: m.Payload}
		case perfNetDataKind:
			data++
		case perfNetEndKind:
			reply = &transport.Message{Class: transport.Ack, Kind: perfNetEndKind, Index: m.Index, Term: data}
			data = 0
		}
		if reply != nil {
			if err := n.Send(reply); err != nil && !errors.Is(err, transport.ErrTimeout) {
				return err
			}
		}
	}
}

// perfNetPing measures j.Count round trips per size and, with j.TputDur,
// the messages per second one ddsnet Log stream delivers.
func perfNetPing(ctx context.Context, j perfJob, emit func(perf.Row) error) error {
	n, in, err := perfNet(j, 1)
	if err != nil {
		return err
	}
	defer n.Close()
	var seq uint64
	// await waits for the answer of kind to seq (older answers, e.g. to
	// repeated warm-up pings, are skipped).
	await := func(kind uint16, timeout time.Duration) (*transport.Message, error) {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		for {
			m := in.next(ctx, tm.C)
			if m == nil {
				return nil, ctx.Err()
			}
			if m.Kind == kind && m.Index == seq {
				return m, nil
			}
		}
	}
	roundTrip := func(payload []byte, timeout time.Duration) (bool, error) {
		seq++
		if err := n.Send(&transport.Message{Class: transport.Log, Kind: perfNetPingKind, Index: seq, Payload: payload}); err != nil {
			return false, err
		}
		m, err := await(perfNetPongKind, timeout)
		return m != nil, err
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
		row := perf.Row{Size: sz, RTT: perf.Summarise(d)}
		if j.TputDur > 0 {
			if row.Tput, err = perfNetThroughput(ctx, n, &seq, await, payload, j.TputDur); err != nil {
				return fmt.Errorf("perf: ddsnet throughput at size %d: %w", sz, err)
			}
		}
		if err := emit(row); err != nil {
			return err
		}
	}
	return nil
}

// perfNetThroughput sends Log messages as fast as Send takes them for dur,
// then an end marker on the same (ordered) class; the responder answers it
// with the count it received, so the rate covers delivery to the peer's
// owner goroutine, not just queueing here.
func perfNetThroughput(ctx context.Context, n *ddsnet.Net, seq *uint64,
	await func(uint16, time.Duration) (*transport.Message, error), payload []byte, dur time.Duration) (perf.Tput, error) {
	start := time.Now()
	deadline := start.Add(dur)
	var sent uint64
	for i := 0; ; i++ {
		if i&63 == 0 && time.Now().After(deadline) {
			break
		}
		err := n.Send(&transport.Message{Class: transport.Log, Kind: perfNetDataKind, Index: sent, Payload: payload})
		if errors.Is(err, transport.ErrTimeout) {
			// The writer and the queue behind it are full (Send never
			// waits on this class): give the peer a moment rather than
			// spin against the threads that drain them.
			time.Sleep(50 * time.Microsecond)
			continue
		}
		if err != nil {
			return perf.Tput{}, err
		}
		sent++
	}
	*seq++
	if err := n.Send(&transport.Message{Class: transport.Log, Kind: perfNetEndKind, Index: *seq}); err != nil {
		return perf.Tput{}, err
	}
	m, err := await(perfNetEndKind, 30*time.Second)
	if err != nil {
		return perf.Tput{}, err
	}
	if m == nil {
		return perf.Tput{}, errors.New("no count from the responder")
	}
	if m.Term != sent {
		return perf.Tput{}, fmt.Errorf("responder received %d of %d messages", m.Term, sent)
	}
	el := time.Since(start).Seconds()
	rate := float64(sent) / el
	return perf.Tput{Count: int(sent), Rate: rate, MBps: rate * float64(len(payload)) / 1e6}, nil
}
