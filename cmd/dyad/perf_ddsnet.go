package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/ddsnet"
	"github.com/dyad-db/dyad/internal/perf"
	"github.com/dyad-db/dyad/internal/transport"
)

// The replication path: ddsnet (the transport replication uses) signalling
// an owner goroutine, which takes the waiting batches into a bounded queue
// (Resume) on every turn, exactly as the replication loop is fed
// (internal/server/inbox.go). A ping is a Log
// message, the pong an Ack, as an entry and its acknowledgement travel.
// With perfJob.WaitSet (row dyad-ddsnet+ws) the owner instead waits in
// ddsnet's Wait (ddsnet.Config.WaitSet), which takes and offers on the
// owner's goroutine; its layers then put the wake-up in C into deliver
// (the notification stamp is when the wait in C returned) and into wake
// the takes in C and the return to Go (to Wait's first callback).
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
	// waitSet: the owner waits in ddsnet's Wait (ddsnet.Config.WaitSet)
	// instead of on Ready.
	waitSet bool
	mu      sync.Mutex // serialises offers' room check and sends
	ch      chan *transport.Message
	// notified[c] is when a reader of class c last signalled (wall clock,
	// ns; set on Cyclone's thread), woke when the owner last ran because
	// Ready fired (the owner's goroutine only): the stamps of NetPath.
	notified [transport.NumClasses]atomic.Int64
	woke     int64
	// wrote is what the owner's last Send of a Log message measured of
	// its write (Config.OnWrite runs on the Send's goroutine).
	wrote dds.WriteStamp
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
		if q.waitSet {
			// Wait in C, bounded so that ctx and timeout are seen
			// without a goroutine to Wake it.
			select {
			case <-ctx.Done():
				return nil
			case <-timeout:
				return nil
			default:
			}
			if _, err := q.net.Wait(perfNetWaitPoll); err != nil {
				return nil
			}
			continue
		}
		select {
		case m := <-q.ch:
			return m
		case <-q.net.Ready():
			q.woke = time.Now().UnixNano()
			continue
		case <-ctx.Done():
		case <-timeout:
		}
		return nil
	}
}

// stamps returns, for a message of class c just taken from next, when its
// reader signalled and when the owner woke for it (the signal's time when
// the owner was not parked). ok is false when the signal is older than
// since (the message came without one of its own).
func (q *perfInbox) stamps(c transport.Class, since int64) (notified, woke int64, ok bool) {
	notified = q.notified[c].Load()
	return notified, max(q.woke, notified), notified >= since
}

// perfNetWaitPoll bounds each of the owner's Waits (ddsnet.Config.WaitSet).
const perfNetWaitPoll = 50 * time.Millisecond

func perfNet(j perfJob, node uint64) (*ddsnet.Net, *perfInbox, error) {
	q := &perfInbox{ch: make(chan *transport.Message, 4096), waitSet: j.WaitSet}
	n, err := ddsnet.New(ddsnet.Config{DDS: j.config(), Cluster: perfNetCluster, Node: node, Prefix: "dyadperf", WaitSet: j.WaitSet,
		OnNotify: func(c transport.Class) {
			if q.waitSet {
				// On the owner's goroutine inside Wait: the signal is
				// the wait's return in C, the wake-up this moment.
				q.woke = time.Now().UnixNano()
				q.notified[c].Store(q.net.WaitReturned())
				return
			}
			q.notified[c].Store(time.Now().UnixNano())
		},
		OnWrite: func(c transport.Class, st dds.WriteStamp) {
			if c == transport.Log {
				q.wrote = st
			}
		}})
	if err != nil {
		return nil, nil, err
	}
	q.net = n
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
	if j.Lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	ready()
	var data uint64
	var lastSend int64 // the previous pong's Send, ns
	for {
		m := in.next(ctx, nil)
		if m == nil {
			return nil
		}
		got := time.Now().UnixNano()
		var reply *transport.Message
		switch m.Kind {
		case perfNetPingKind:
			reply = &transport.Message{Class: transport.Ack, Kind: perfNetPongKind, Index: m.Index, Payload: m.Payload}
			if p := m.Payload; len(p) >= netPathBytes { // the payload is the owner's (BatchHandler)
				notified, woke, ok := in.stamps(transport.Log, int64(binary.BigEndian.Uint64(p)))
				if !ok {
					notified, woke = 0, 0 // the pinger skips this one
				}
				binary.BigEndian.PutUint64(p[8:], uint64(notified))
				binary.BigEndian.PutUint64(p[16:], uint64(woke))
				binary.BigEndian.PutUint64(p[24:], uint64(got))
				binary.BigEndian.PutUint64(p[40:], uint64(lastSend))
				start := time.Now()
				binary.BigEndian.PutUint64(p[32:], uint64(start.UnixNano()))
				if err := n.Send(reply); err != nil && !errors.Is(err, transport.ErrTimeout) {
					return err
				}
				lastSend = int64(time.Since(start))
				m.Release() // Send keeps no payload
				continue
			}
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
		m.Release() // after the Send (a pong may echo the payload; Send keeps none)
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
	if j.Lock {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	var seq uint64
	// await waits for the answer of kind to seq (older answers, e.g. to
	// repeated warm-up pings, are skipped and released); the caller
	// releases the answer.
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
			m.Release()
		}
	}
	var path netPathSums
	var writes []perf.WriteSample
	roundTrip := func(payload []byte, timeout time.Duration) (bool, error) {
		seq++
		start := time.Now()
		if len(payload) >= netPathBytes {
			binary.BigEndian.PutUint64(payload, uint64(start.UnixNano()))
		}
		if err := n.Send(&transport.Message{Class: transport.Log, Kind: perfNetPingKind, Index: seq, Payload: payload}); err != nil {
			return false, err
		}
		sent := time.Now()
		if payload != nil {
			writes = append(writes, perfWriteSample(sent.Sub(start), in.wrote))
		}
		m, err := await(perfNetPongKind, timeout)
		if m != nil && len(m.Payload) >= netPathBytes {
			path.add(in, start, sent, m.Payload)
		}
		if m != nil {
			m.Release()
		}
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
		path = netPathSums{}
		writes = writes[:0]
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
		row := perf.Row{Size: sz, RTT: perf.Summarise(d), Path: path.path(), Writes: perf.SplitWrites(writes, perfWriteSample(0, dds.StampCost(1000)))}
		if j.TputDur > 0 {
			burst := 1
			if j.WriteBatch {
				burst = perfBurst
			}
			if row.Tput, err = perfNetThroughput(ctx, n, &seq, await, payload, j.TputDur, burst); err != nil {
				return fmt.Errorf("perf: ddsnet throughput at size %d: %w", sz, err)
			}
		}
		if err := emit(row); err != nil {
			return err
		}
	}
	return nil
}

// perfNetThroughput sends Log messages as fast as SendAll takes them, burst
// per call, for dur, then an end marker on the same (ordered) class; the
// responder answers it with the count it received, so the rate covers
// delivery to the peer's owner goroutine, not just queueing here.
func perfNetThroughput(ctx context.Context, n *ddsnet.Net, seq *uint64,
	await func(uint16, time.Duration) (*transport.Message, error), payload []byte, dur time.Duration, burst int) (perf.Tput, error) {
	// The round trips' write stamping (two getrusage calls per write)
	// is not part of the path; the count is.
	n.StampWrites(false)
	defer n.StampWrites(true)
	start := time.Now()
	deadline := start.Add(dur)
	var sent uint64
	msgs := make([]transport.Message, burst)
	ms := make([]*transport.Message, burst)
	for i := 0; ; i++ {
		if i%max(1, 64/burst) == 0 && time.Now().After(deadline) {
			break
		}
		for k := range msgs {
			msgs[k] = transport.Message{Class: transport.Log, Kind: perfNetDataKind, Index: sent + uint64(k), Payload: payload}
			ms[k] = &msgs[k]
		}
		took, err := n.SendAll(ms)
		sent += uint64(took)
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
	got := m.Term
	m.Release()
	if got != sent {
		return perf.Tput{}, fmt.Errorf("responder received %d of %d messages", got, sent)
	}
	el := time.Since(start).Seconds()
	rate := float64(sent) / el
	return perf.Tput{Count: int(sent), Rate: rate, MBps: rate * float64(len(payload)) / 1e6}, nil
}

// netPathBytes is the smallest ping that carries the stamps of a
// NetPath: the pinger's send (0), the responder's notification (8), wake
// (16), ping in hand (24), pong send (32) and its previous pong's Send
// duration (40), big-endian ns.
const netPathBytes = 48

// netPathSums collects a size's stamped round trips, layer by layer.
type netPathSums struct{ write, deliver, wake, take, turn []time.Duration }

// add takes one round trip: the ping sent at start (Send returned at sent)
// and the pong's payload, now in hand. The pong's own Send is known only
// one round trip late (the responder stamps its previous one), so that
// one stands in for it: it moves from deliver to write. A round trip
// whose notification stamps do not follow it (a message taken without a
// signal of its own) is skipped.
func (s *netPathSums) add(in *perfInbox, start, sent time.Time, p []byte) {
	got := time.Now().UnixNano()
	u := func(off int) int64 { return int64(binary.BigEndian.Uint64(p[off:])) }
	rNotified, rWoke, rGot, rSend, pongWrite := u(8), u(16), u(24), u(32), u(40)
	notified, woke, ok := in.stamps(transport.Ack, rSend)
	if rNotified == 0 || pongWrite == 0 || !ok || got < woke {
		return
	}
	d := func(ns int64) time.Duration { return time.Duration(ns) }
	s.write = append(s.write, sent.Sub(start)+d(pongWrite))
	s.deliver = append(s.deliver, d(rNotified-sent.UnixNano()+notified-rSend-pongWrite))
	s.wake = append(s.wake, d(rWoke-rNotified+woke-notified))
	s.take = append(s.take, d(rGot-rWoke+got-woke))
	s.turn = append(s.turn, d(rSend-rGot))
}

// path is the NetPath of what add took (nil: nothing stamped).
func (s *netPathSums) path() *perf.NetPath {
	if len(s.write) == 0 {
		return nil
	}
	p := &perf.NetPath{Count: len(s.write)}
	for _, l := range []struct {
		d         []time.Duration
		mean, p50 *time.Duration
	}{{s.write, &p.Mean.Write, &p.P50.Write}, {s.deliver, &p.Mean.Deliver, &p.P50.Deliver},
		{s.wake, &p.Mean.Wake, &p.P50.Wake}, {s.take, &p.Mean.Take, &p.P50.Take}, {s.turn, &p.Mean.Turn, &p.P50.Turn}} {
		sum := perf.Summarise(l.d)
		*l.mean, *l.p50 = sum.Mean, sum.P50
	}
	return p
}
