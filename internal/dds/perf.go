package dds

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"time"
)

// Perf topics and sample kinds. They are private to the perf protocol and
// never carry replication traffic.
const (
	PerfPingTopic = "dyad_perf_ping"
	PerfPongTopic = "dyad_perf_pong"

	perfPing  = 1 // echo me (Term = sender's clock, ns)
	perfData  = 2 // count me
	perfFlush = 3 // reply with perfAck carrying the count since the last flush
	perfPong  = 4
	perfAck   = 5
)

// PerfOptions select the receive path used by the perf functions, so the
// paths can be compared (see doc.go for the figures).
type PerfOptions struct {
	Mode ReceiveMode
	// Inline handles samples on the receive thread (ReaderOptions.Handler):
	// the responder echoes from there and the pinger sends the next ping
	// from there, as ddsperf does. Otherwise samples go through the
	// reader's channel to a separate goroutine, which is how a protocol
	// owner normally consumes them.
	Inline bool
	// Verify makes PingPong compare every echoed payload with the one sent
	// (an error on mismatch). Costs a memcmp per round trip.
	Verify bool
	// MatchTimeout bounds discovery of the peer. Default 10s.
	MatchTimeout time.Duration
	// LockOSThread locks the goroutines that write (PingPong's and
	// Respond's, when not Inline) to their OS threads.
	//
	// Mode ReceiveWaitSet (not Inline) makes PingPong's and Respond's
	// goroutines wait on a WaitSet over their reader: one cgo call waits
	// and takes, and the same goroutine answers or sends the next ping,
	// with no channel and no call into Go on Cyclone's thread.
	LockOSThread bool
	// StampWrites makes PingPong measure its pings' writes
	// (Writer.WriteStamped) into Stats.Writes.
	StampWrites bool
	// Burst makes Throughput Queue its samples and Flush after every
	// Burst of them (the participant needs Config.WriteBatch to batch
	// them into shared datagrams, as ddsperf's publisher does). 0: each
	// sample is written on its own.
	Burst int
}

// PerfWrite is one of PingPong's stamped ping writes: Send is the Write
// call as its caller saw it.
type PerfWrite struct {
	Send  time.Duration
	Stamp WriteStamp
}

// Stats summarise a PingPong (round-trip times) or Throughput run.
type Stats struct {
	Size     int
	Count    int           // round trips, or samples delivered
	Elapsed  time.Duration // whole measured phase
	Min, P50 time.Duration
	P90, P99 time.Duration
	Max      time.Duration
	Mean     time.Duration
	Rate     float64 // samples/s (Throughput)
	MBps     float64 // payload MB/s (10^6 bytes, Throughput)
	Timeouts int     // Write calls that returned ErrTimeout and were retried
	// Writes are the measured pings' writes (PerfOptions.StampWrites).
	Writes []PerfWrite `json:",omitempty"`
}

func (s Stats) String() string {
	if s.Rate > 0 {
		return fmt.Sprintf("size=%d n=%d %.0f samples/s %.1f MB/s (timeouts %d)", s.Size, s.Count, s.Rate, s.MBps, s.Timeouts)
	}
	return fmt.Sprintf("size=%d n=%d rtt min=%v p50=%v p90=%v p99=%v max=%v mean=%v",
		s.Size, s.Count, s.Min, s.P50, s.P90, s.P99, s.Max, s.Mean)
}

func rttStats(size int, d []time.Duration, elapsed time.Duration) Stats {
	st := Stats{Size: size, Count: len(d), Elapsed: elapsed}
	if len(d) == 0 {
		return st
	}
	slices.Sort(d)
	pct := func(p float64) time.Duration { return d[min(len(d)-1, int(p*float64(len(d))))] }
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	st.Min, st.P50, st.P90, st.P99, st.Max = d[0], pct(.5), pct(.9), pct(.99), d[len(d)-1]
	st.Mean = sum / time.Duration(len(d))
	return st
}

// check refuses Inline with ReceiveWaitSet: a waitset reader has no
// receive thread to handle samples on.
func (o PerfOptions) check() error {
	if o.Inline && o.Mode == ReceiveWaitSet {
		return errors.New("dds perf: Inline needs a receive thread; ReceiveWaitSet has none")
	}
	return nil
}

func (o PerfOptions) matchTimeout() time.Duration {
	if o.MatchTimeout > 0 {
		return o.MatchTimeout
	}
	return 10 * time.Second
}

// Respond runs the perf responder on p until ctx ends: it echoes pings and
// counts/acks throughput data. Use it on the far side of PingPong and
// Throughput.
func Respond(ctx context.Context, p *Participant, opt PerfOptions) error {
	if err := opt.check(); err != nil {
		return err
	}
	w, err := p.NewWriter(PerfPongTopic, QoS{})
	if err != nil {
		return err
	}
	defer w.Close()
	var count uint64
	var werr error
	answer := func(h *Header, payload []byte) {
		switch h.Kind {
		case perfPing:
			if err := w.Write(&Header{Kind: perfPong, Term: h.Term, Index: h.Index}, payload); err != nil && werr == nil {
				werr = err
			}
		case perfData:
			count++
		case perfFlush:
			if err := w.Write(&Header{Kind: perfAck, Index: count, Term: h.Index}, nil); err != nil && werr == nil {
				werr = err
			}
			count = 0
		}
	}
	handle := func(s *Sample) {
		answer(&s.Header, s.Payload)
		s.Release()
	}
	ropt := ReaderOptions{Mode: opt.Mode}
	if opt.Inline {
		ropt.Handler = handle
	}
	r, err := p.NewReader(PerfPingTopic, ropt)
	if err != nil {
		return err
	}
	defer r.Close()
	if opt.Inline {
		<-ctx.Done()
		return nil
	}
	if opt.LockOSThread {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
	}
	if opt.Mode == ReceiveWaitSet {
		ws, err := perfWaitSet(p, r)
		if err != nil {
			return err
		}
		defer ws.Close()
		// Pings are answered inside Wait's callback: on this goroutine,
		// right after the one cgo call that waited and took them.
		for ctx.Err() == nil {
			if _, err := ws.Wait(perfWaitPoll, func(_ *Reader, h *Header, p []byte) { answer(h, p) }); err != nil {
				return err
			}
			if werr != nil {
				return werr
			}
		}
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case s := <-r.C():
			handle(s)
			if werr != nil {
				return werr
			}
		}
	}
}

// perfWaitPoll bounds each Wait of the ReceiveWaitSet perf ends, so that
// they see their context end without a goroutine to Wake them.
const perfWaitPoll = 50 * time.Millisecond

// perfWaitSet makes a WaitSet on p with r attached.
func perfWaitSet(p *Participant, r *Reader) (*WaitSet, error) {
	ws, err := p.NewWaitSet()
	if err != nil {
		return nil, err
	}
	if err := ws.Attach(r); err != nil {
		ws.Close()
		return nil, err
	}
	return ws, nil
}

// perfEnds creates the pinger's reader and waits until both w and the
// reader have matched the peer.
func perfEnds(ctx context.Context, p *Participant, opt PerfOptions, w *Writer, handler func(*Sample)) (*Reader, error) {
	r, err := p.NewReader(PerfPongTopic, ReaderOptions{Mode: opt.Mode, Handler: handler})
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithTimeout(ctx, opt.matchTimeout())
	defer cancel()
	if err := w.WaitMatched(mctx, 1); err == nil {
		err = r.WaitMatched(mctx, 1)
	}
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("dds perf: peer not discovered: %w", err)
	}
	return r, nil
}

// PingPong measures count round trips of size-byte payloads against a
// Respond running on another participant (normally another process/host).
func PingPong(ctx context.Context, p *Participant, opt PerfOptions, size, count int) (Stats, error) {
	if count <= 0 {
		return Stats{}, errors.New("dds perf: count must be > 0")
	}
	if err := opt.check(); err != nil {
		return Stats{}, err
	}
	payload := make([]byte, size)
	for i := range payload {
		payload[i] = byte(i)
	}
	rtts := make([]time.Duration, 0, count)
	var writes []PerfWrite
	// ping writes a measured ping (stamped with opt.StampWrites). It runs
	// where the pings are sent: on the receive thread (inline) or the
	// caller's goroutine, never both at once.
	ping := func(w *Writer, h *Header) error {
		if !opt.StampWrites {
			return w.Write(h, payload)
		}
		var st WriteStamp
		t := time.Now()
		err := w.WriteStamped(h, payload, &st)
		writes = append(writes, PerfWrite{Send: time.Since(t), Stamp: st})
		return err
	}
	pongs := make(chan uint64, 16) // warm-up pong seen (inline mode)
	done := make(chan error, 1)
	w, err := p.NewWriter(PerfPingTopic, QoS{})
	if err != nil {
		return Stats{}, err
	}
	defer w.Close()
	var handler func(*Sample)
	if opt.Inline {
		// All state below is confined to the receive thread until done
		// is signalled.
		var t0 time.Time
		next := uint64(0)
		handler = func(s *Sample) {
			idx, k := s.Index, s.Kind
			bad := opt.Verify && k == perfPong && !bytes.Equal(s.Payload, payload)
			s.Release()
			if k != perfPong || idx != next {
				return
			}
			if bad {
				done <- fmt.Errorf("dds perf: pong %d payload corrupted", idx)
				return
			}
			if idx != 0 {
				rtts = append(rtts, time.Since(t0))
				if len(rtts) == count {
					done <- nil
					return
				}
			} else {
				pongs <- 0 // stop the warm-up loop
			}
			next++
			t0 = time.Now()
			if err := ping(w, &Header{Kind: perfPing, Index: next}); err != nil {
				done <- err
			}
		}
	}
	r, err := perfEnds(ctx, p, opt, w, handler)
	if err != nil {
		return Stats{}, err
	}
	defer r.Close()
	var ws *WaitSet
	if opt.Mode == ReceiveWaitSet {
		if ws, err = perfWaitSet(p, r); err != nil {
			return Stats{}, err
		}
		defer ws.Close()
	}
	// recvWait is recv for ReceiveWaitSet: the pong is taken and checked
	// by the Wait's one cgo call and its callback, on this goroutine.
	recvWait := func(want uint64, timeout time.Duration) (bool, error) {
		var deadline time.Time
		if timeout > 0 {
			deadline = time.Now().Add(timeout)
		}
		for {
			got, bad := false, false
			wait := perfWaitPoll
			if timeout > 0 {
				wait = min(wait, max(time.Until(deadline), 0))
			}
			if _, err := ws.Wait(wait, func(_ *Reader, h *Header, p []byte) {
				if h.Kind == perfPong && h.Index == want {
					got = true
					bad = opt.Verify && !bytes.Equal(p, payload)
				}
			}); err != nil {
				return false, err
			}
			switch {
			case bad:
				return false, fmt.Errorf("dds perf: pong %d payload corrupted", want)
			case got:
				return true, nil
			case ctx.Err() != nil:
				return false, ctx.Err()
			case timeout > 0 && !time.Now().Before(deadline):
				return false, nil
			}
		}
	}
	recv := func(want uint64, timeout <-chan time.Time) (bool, error) {
		for {
			select {
			case <-ctx.Done():
				return false, ctx.Err()
			case <-timeout:
				return false, nil
			case idx := <-pongs:
				if idx == want {
					return true, nil
				}
			case s, ok := <-r.C():
				if !ok {
					return false, ErrClosed
				}
				idx, k := s.Index, s.Kind
				bad := opt.Verify && k == perfPong && !bytes.Equal(s.Payload, payload)
				s.Release()
				if k == perfPong && idx == want {
					if bad {
						return false, fmt.Errorf("dds perf: pong %d payload corrupted", idx)
					}
					return true, nil
				}
			}
		}
	}
	// Warm-up: the responder may not have discovered our reader yet, so
	// repeat ping 0 until it is answered.
	for {
		if err := w.Write(&Header{Kind: perfPing, Index: 0}, payload); err != nil {
			return Stats{}, err
		}
		var ok bool
		if ws != nil {
			ok, err = recvWait(0, 200*time.Millisecond)
		} else {
			ok, err = recv(0, time.After(200*time.Millisecond))
		}
		if err != nil {
			return Stats{}, err
		}
		if ok {
			break
		}
	}
	start := time.Now()
	if opt.Inline {
		select {
		case err := <-done:
			if err != nil {
				return Stats{}, err
			}
		case <-ctx.Done():
			return Stats{}, ctx.Err()
		}
	} else {
		if opt.LockOSThread {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
		}
		for i := 1; i <= count; i++ {
			t := time.Now()
			if err := ping(w, &Header{Kind: perfPing, Index: uint64(i)}); err != nil {
				return Stats{}, err
			}
			var err error
			if ws != nil {
				_, err = recvWait(uint64(i), 0)
			} else {
				_, err = recv(uint64(i), nil)
			}
			if err != nil {
				return Stats{}, err
			}
			rtts = append(rtts, time.Since(t))
		}
	}
	st := rttStats(size, rtts, time.Since(start))
	st.Writes = writes
	return st, nil
}

// Throughput publishes size-byte samples as fast as the reliable protocol
// allows for dur, then waits until the responder confirms it received all
// of them. Rate counts only samples the responder acknowledged.
func Throughput(ctx context.Context, p *Participant, opt PerfOptions, size int, dur time.Duration) (Stats, error) {
	opt.Inline = false
	if opt.Mode == ReceiveWaitSet {
		// The pinger here only waits for two acks; the path under test
		// is the responder's.
		opt.Mode = ReceiveListener
	}
	w, err := p.NewWriter(PerfPingTopic, QoS{})
	if err != nil {
		return Stats{}, err
	}
	defer w.Close()
	r, err := perfEnds(ctx, p, opt, w, nil)
	if err != nil {
		return Stats{}, err
	}
	defer r.Close()
	// Make sure the responder's ack writer matched us (flush 0 / ack).
	waitAck := func(flushID uint64, timeout time.Duration) (uint64, bool, error) {
		tm := time.After(timeout)
		for {
			select {
			case <-ctx.Done():
				return 0, false, ctx.Err()
			case <-tm:
				return 0, false, nil
			case s, ok := <-r.C():
				if !ok {
					return 0, false, ErrClosed
				}
				k, n, id := s.Kind, s.Index, s.Term
				s.Release()
				if k == perfAck && id == flushID {
					return n, true, nil
				}
			}
		}
	}
	for id := uint64(1); ; id++ {
		if err := w.Write(&Header{Kind: perfFlush, Index: id}, nil); err != nil {
			return Stats{}, err
		}
		_, ok, err := waitAck(id, 200*time.Millisecond)
		if err != nil {
			return Stats{}, err
		}
		if ok {
			break
		}
	}
	payload := make([]byte, size)
	st := Stats{Size: size}
	start := time.Now()
	deadline := start.Add(dur)
	var n uint64
	write := w.Write
	if opt.Burst > 0 {
		write = w.Queue
	}
	for i := 0; ; i++ {
		if i&63 == 0 && time.Now().After(deadline) {
			break
		}
		err := write(&Header{Kind: perfData, Index: n}, payload)
		if opt.Burst > 0 && (i+1)%opt.Burst == 0 {
			if ferr := w.Flush(); ferr != nil {
				return st, ferr
			}
		}
		if errors.Is(err, ErrTimeout) {
			st.Timeouts++
			continue
		}
		if err != nil {
			return st, err
		}
		n++
	}
	const finalID = 1 << 62
	if err := w.Write(&Header{Kind: perfFlush, Index: finalID}, nil); err != nil {
		return st, err
	}
	got, ok, err := waitAck(finalID, 30*time.Second)
	if err != nil {
		return st, err
	}
	if !ok {
		return st, errors.New("dds perf: no final ack from responder")
	}
	if got != n {
		return st, fmt.Errorf("dds perf: responder counted %d samples, sent %d", got, n)
	}
	st.Elapsed = time.Since(start)
	st.Count = int(n)
	st.Rate = float64(n) / st.Elapsed.Seconds()
	st.MBps = st.Rate * float64(size) / 1e6
	return st, nil
}
