package ddsnet

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/transport"
)

// testDomain keeps concurrent test binaries apart (DDS domains 0..232).
func testDomain() uint32 { return uint32(100 + os.Getpid()%100) }

func pair(t *testing.T, clusterB uint64) (*Net, *Net, chan *transport.Message, chan *transport.Message) {
	t.Helper()
	cfg := dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}
	ga, gb := make(chan *transport.Message, 100000), make(chan *transport.Message, 100000)
	a, b := startPair(t, Config{DDS: cfg, Cluster: 7, Node: 1}, Config{DDS: cfg, Cluster: clusterB, Node: 2}, handTo(ga), handTo(gb))
	return a, b, ga, gb
}

// startPair makes the nets a and b of configurations ca and cb, starts
// each with its start function, closes both when the test ends, and
// returns once they have matched each other.
func startPair(t *testing.T, ca, cb Config, startA, startB func(*Net) error) (*Net, *Net) {
	t.Helper()
	a, err := New(ca)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(cb)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	if err := startA(a); err != nil {
		t.Fatal(err)
	}
	if err := startB(b); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !a.PeerMatched() || !b.PeerMatched() {
		if time.Now().After(deadline) {
			t.Fatal("the two nets never matched")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a, b
}

// handTo is a start function that hands every message to c.
func handTo(c chan<- *transport.Message) func(*Net) error {
	return func(n *Net) error { return n.Start(func(m *transport.Message) { c <- m }) }
}

// discard is a start function that drops every message.
func discard(n *Net) error { return n.Start(func(*transport.Message) {}) }

func recv(t *testing.T, c chan *transport.Message) *transport.Message {
	t.Helper()
	select {
	case m := <-c:
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing received")
		return nil
	}
}

func TestEveryClassInOrder(t *testing.T) {
	a, _, _, gb := pair(t, 7)
	sizes := []int{0, 1, 1344, 65536, 1 << 20}
	for c := transport.Class(0); c < transport.NumClasses; c++ {
		for i, n := range sizes {
			p := bytes.Repeat([]byte{byte(c), byte(i)}, n/2)
			if err := a.Send(&transport.Message{Class: c, Kind: uint16(i + 1), Flags: 3, Term: 9, Index: uint64(i), Payload: p}); err != nil {
				t.Fatal(err)
			}
		}
	}
	got := map[transport.Class][]uint64{}
	for k := 0; k < int(transport.NumClasses)*len(sizes); k++ {
		m := recv(t, gb)
		if m.From != 1 || m.Cluster != 7 || m.Term != 9 || m.Flags != 3 || m.Kind != uint16(m.Index+1) {
			t.Fatalf("header: %+v", *m)
		}
		want := bytes.Repeat([]byte{byte(m.Class), byte(m.Index)}, sizes[m.Index]/2)
		if !bytes.Equal(m.Payload, want) {
			t.Fatalf("class %s #%d: payload of %d bytes differs", m.Class, m.Index, len(m.Payload))
		}
		got[m.Class] = append(got[m.Class], m.Index)
	}
	for c, idx := range got {
		if fmt.Sprint(idx) != "[0 1 2 3 4]" {
			t.Errorf("class %s arrived as %v", c, idx)
		}
	}
}

func TestManyMessagesArriveCompleteAndInOrder(t *testing.T) {
	a, _, _, gb := pair(t, 7)
	const n = 10000
	go func() {
		for i := 0; i < n; i++ {
			a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: make([]byte, 200)})
		}
	}()
	for i := 0; i < n; i++ {
		if m := recv(t, gb); m.Index != uint64(i) {
			t.Fatalf("message %d arrived as %d", i, m.Index)
		}
	}
}

// TestOtherClusterAndOwnSamplesDropped sends on a reliable class (a lost
// best-effort sample would pass for a dropped one) and waits until each
// side's reader has seen the other's sample and dropped it; only then is
// "nothing delivered" a fact rather than "nothing delivered yet".
func TestOtherClusterAndOwnSamplesDropped(t *testing.T) {
	a, b, ga, gb := pair(t, 8) // b belongs to another cluster
	if err := a.Send(&transport.Message{Class: transport.Control, Index: 1}); err != nil {
		t.Fatal(err)
	}
	if err := b.Send(&transport.Message{Class: transport.Control, Index: 2}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		fa, _ := a.Dropped()
		fb, _ := b.Dropped()
		if fa >= 1 && fb >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("samples of the other cluster dropped: a %d, b %d; want both to see one", fa, fb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case m := <-gb:
		t.Fatalf("b received a message of another cluster: %+v", *m)
	case m := <-ga:
		t.Fatalf("a received a message of another cluster or its own: %+v", *m)
	default:
	}
	// A node's own samples, if Cyclone delivers them to its readers at
	// all, reach them inside the write, before Send returns: they too
	// would be in ga or gb by now.
	_, oa := a.Dropped()
	_, ob := b.Dropped()
	t.Logf("own samples dropped: a %d, b %d", oa, ob)
}

func TestSendAfterClose(t *testing.T) {
	a, _, _, _ := pair(t, 7)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal("second Close:", err)
	}
	if err := a.Send(&transport.Message{Class: transport.Log}); err != transport.ErrClosed {
		t.Fatalf("Send after Close: %v", err)
	}
}

// gate is a consumer that refuses batches of its class (zero: Log) while
// refuseLog is set, and any batch that would queue more than room messages
// (0: no bound), and queues everything it accepts, as the replication
// loop's inbox does when full.
type gate struct {
	refuseLog atomic.Bool
	class     transport.Class
	room      int
	got       chan *transport.Message
}

func (g *gate) offer(ms []*transport.Message) bool {
	if ms[0].Class == g.class && g.refuseLog.Load() {
		return false
	}
	if g.room > 0 && len(g.got)+len(ms) > g.room {
		return false
	}
	for _, m := range ms {
		g.got <- m
	}
	return true
}

// batchPair is a Net a (node 1) and a batching Net b (node 2) whose
// consumer is g, over loopback; cfg's Domain must not be another test's
// with a different configuration (one Cyclone domain per process).
func batchPair(t *testing.T, cfg Config, g *gate) (*Net, *Net) {
	t.Helper()
	cfg.Cluster = 7
	ca, cb := cfg, cfg
	ca.Node, cb.Node = 1, 2
	return startPair(t, ca, cb, discard, func(b *Net) error { return b.StartBatch(g.offer) })
}

// next takes what waits on b (as the replication loop does: Resume on
// every turn and when Ready fires, or with Config.WaitSet Wait where it
// would wait for Ready) and returns the next accepted message.
func next(t *testing.T, b *Net, g *gate) *transport.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	timeout := time.After(time.Until(deadline))
	for {
		b.Resume()
		if b.cfg.WaitSet {
			select {
			case m := <-g.got:
				return m
			default:
			}
			if time.Now().After(deadline) {
				t.Fatal("nothing received")
			}
			if _, err := b.Wait(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			continue
		}
		select {
		case m := <-g.got:
			return m
		case <-b.Ready():
		case <-timeout:
			t.Fatal("nothing received")
			return nil
		}
	}
}

// waitRefused waits until b's consumer has refused a batch.
func waitRefused(t *testing.T, b *Net) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	timeout := time.After(time.Until(deadline))
	for b.Resume(); b.Stats().Refused == 0; b.Resume() {
		if b.cfg.WaitSet {
			if time.Now().After(deadline) {
				t.Fatal("no batch was refused")
			}
			if _, err := b.Wait(100 * time.Millisecond); err != nil {
				t.Fatal(err)
			}
			continue
		}
		select {
		case <-b.Ready():
		case <-timeout:
			t.Fatal("no batch was refused")
		}
	}
}

// drainInOrder resumes b and receives want messages of g's class with
// indexes 0..want-1 in order, skipping other classes.
func drainInOrder(t *testing.T, b *Net, g *gate, want int) {
	t.Helper()
	for i := 0; i < want; {
		m := next(t, b, g)
		if m.Class != g.class {
			continue
		}
		if m.Index != uint64(i) || len(m.Payload) == 0 || m.Payload[0] != byte(i) {
			t.Fatalf("log message %d arrived as %d (payload %d bytes)", i, m.Index, len(m.Payload))
		}
		i++
	}
}

// A consumer whose queue is full refuses the batch; that must neither hold
// back the heartbeats nor lose or reorder the refused messages, which
// arrive once the consumer has room.
func TestFullConsumerDoesNotStallHeartbeats(t *testing.T) {
	for _, ws := range []bool{false, true} {
		t.Run(fmt.Sprintf("waitset=%v", ws), func(t *testing.T) { testFullConsumerDoesNotStallHeartbeats(t, ws) })
	}
}

func testFullConsumerDoesNotStallHeartbeats(t *testing.T, waitSet bool) {
	g := &gate{got: make(chan *transport.Message, 100000)}
	g.refuseLog.Store(true)
	a, b := batchPair(t, Config{DDS: dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}, WaitSet: waitSet}, g)
	const n = 1000
	for i := 0; i < n; i++ {
		if err := a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: []byte{byte(i), 1, 2}}); err != nil {
			t.Fatal(err)
		}
	}
	waitRefused(t, b)
	for i := 0; i < 3; i++ {
		if err := a.Send(&transport.Message{Class: transport.Heartbeat, Index: uint64(i)}); err != nil {
			t.Fatal(err)
		}
		m := next(t, b, g)
		if m.Class != transport.Heartbeat || m.Index != uint64(i) {
			t.Fatalf("while the log was refused, got %s #%d instead of heartbeat #%d", m.Class, m.Index, i)
		}
	}
	g.refuseLog.Store(false)
	drainInOrder(t, b, g, n)
	if st := b.Stats(); st.Messages < n+3 || st.Batches == 0 {
		t.Errorf("stats %+v: want at least %d messages handed over", st, n+3)
	}
}

// A RELIABLE Catchup Send at the writer's high-water mark (the peer's
// consumer refuses, its reader history is full, the writer's history
// fills) blocks for SendTimeout and then fails with ErrTimeout, counted in
// Stats; nothing sent before it is lost. (Catch-up is sent off the
// replication loop and wants the peer's pace.)
func TestCatchupSendAtHighWaterMarkTimesOut(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 100000), class: transport.Catchup}
	g.refuseLog.Store(true)
	const timeout = 200 * time.Millisecond
	cfg := Config{
		// Another domain: the Cyclone configuration differs from the
		// other tests' (one configuration per domain and process).
		DDS:              dds.Config{Domain: 200 + uint32(os.Getpid()%33), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second, WhcHigh: 64 << 10},
		SendTimeout:      timeout,
		ReaderMaxSamples: 8,
		Batch:            4,
	}
	a, b := batchPair(t, cfg, g)
	payload := make([]byte, 8<<10)
	sent := 0
	var took time.Duration
	for ; sent < 1000; sent++ {
		payload[0] = byte(sent)
		start := time.Now()
		err := a.Send(&transport.Message{Class: transport.Catchup, Index: uint64(sent), Payload: payload})
		if errors.Is(err, transport.ErrTimeout) {
			took = time.Since(start)
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if sent == 1000 {
		t.Fatal("1000 sends of 8 KiB never reached a 64 KiB high-water mark")
	}
	if took < timeout {
		t.Errorf("Send gave up after %v, before SendTimeout %v", took, timeout)
	}
	if st := a.Stats(); st.SendTimeouts != 1 || st.SendBlocked != 0 {
		t.Errorf("stats %+v: want one timeout and no send queued", st)
	}
	g.refuseLog.Store(false)
	drainInOrder(t, b, g, sent)
}

// The envelope carries each message's version, and from
// transport.VersionAddressed on its addressee, without touching the
// payload; a base-version message arrives with no addressee. A sample of
// an addressed version too short to hold the addressee is dropped and
// counted, not delivered with a made-up one.
func TestVersionAndAddresseeTravel(t *testing.T) {
	a, b, _, gb := pair(t, 7)
	sent := []transport.Message{
		{Class: transport.Control, Kind: 1, To: 2, Payload: []byte("base")},
		{Class: transport.Control, Version: transport.VersionBase, Kind: 2, To: 2, Payload: []byte("base, explicit")},
		{Class: transport.Control, Version: transport.VersionAddressed, Kind: 3, To: 2, Payload: []byte("addressed")},
		{Class: transport.Control, Version: transport.VersionAddressed + 1, Kind: 4, To: 0xfeedface12345678, Payload: nil},
		{Class: transport.Log, Version: transport.VersionAddressed, Kind: 5, To: 9, Payload: bytes.Repeat([]byte{5}, 1<<20)},
	}
	for i := range sent {
		m := sent[i]
		if err := a.Send(&m); err != nil {
			t.Fatal(err)
		}
	}
	byKind := map[uint16]*transport.Message{}
	for range sent {
		m := recv(t, gb)
		byKind[m.Kind] = m
	}
	for _, s := range sent {
		m := byKind[s.Kind]
		wantV, wantTo := s.Version, s.To
		if wantV == 0 {
			wantV = transport.VersionBase
		}
		if wantV < transport.VersionAddressed {
			wantTo = 0
		}
		if m.Version != wantV || m.To != wantTo || !bytes.Equal(m.Payload, s.Payload) {
			t.Errorf("kind %d: version %d, to %x, %d payload bytes; want %d, %x, %d", s.Kind, m.Version, m.To, len(m.Payload), wantV, wantTo, len(s.Payload))
		}
	}

	// A forged short sample: written below ddsnet, as a foreign writer would.
	w, err := a.p.NewWriter(TopicName("dyad", transport.Control), writerQoS(transport.Control, Config{SendTimeout: time.Second}))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		if k, err := w.Matched(); err == nil && k > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the forging writer never matched b's reader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	short0 := b.DroppedShort()
	if err := w.Write(&dds.Header{Version: transport.VersionAddressed, Kind: 7, Cluster: 7, Node: 1}, []byte{1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for b.DroppedShort() == short0 {
		select {
		case m := <-gb:
			t.Fatalf("a short addressed sample was delivered: %+v", *m)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the short sample was never dropped")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// The replication loop sends on every class but Catchup, and a loop
// blocked in Send stops ticking: a stall over a quarter lease looks to its
// detector like a freeze of the node and restarts its count of the peer's
// silence, so a peer whose reader stopped taking (frozen, or too slow)
// would delay the failover it should cause. A Send at the writer's
// high-water mark must therefore return without waiting for the peer.
// What it accepted still arrives, in order, once the peer takes again,
// and the other classes (heartbeats) pass meanwhile.
func TestSendAtHighWaterMarkDoesNotBlock(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 100000)}
	g.refuseLog.Store(true)
	cfg := Config{
		// Another domain: the Cyclone configuration differs from the
		// other tests' (one configuration per domain and process).
		DDS:              dds.Config{Domain: 1 + uint32(os.Getpid()%90), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second, WhcHigh: 64 << 10},
		Backlog:          256 << 10,
		ReaderMaxSamples: 8,
		Batch:            4,
	}
	a, b := batchPair(t, cfg, g)
	type result struct {
		sent int
		err  error
	}
	done := make(chan result, 1)
	go func() {
		payload := make([]byte, 8<<10)
		for i := 0; i < 1000; i++ {
			payload[0] = byte(i)
			if err := a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: payload}); err != nil {
				done <- result{i, err}
				return
			}
		}
		done <- result{1000, nil}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Send blocked at the writer's high-water mark (stats %+v)", a.Stats())
	}
	if !errors.Is(r.err, transport.ErrTimeout) {
		t.Fatalf("after %d sends of 8 KiB against a 64 KiB high-water mark: %v, want a refusal (ErrTimeout) once the queue behind the writer is full", r.sent, r.err)
	}
	st := a.Stats()
	if st.SendBlocked == 0 || st.SendTimeouts != 1 {
		t.Errorf("stats %+v: want sends counted as blocked and one refusal", st)
	}
	// The log is held back; a heartbeat is not.
	if err := a.Send(&transport.Message{Class: transport.Heartbeat, Index: 1}); err != nil {
		t.Fatal(err)
	}
	if m := next(t, b, g); m.Class != transport.Heartbeat {
		t.Fatalf("got %s #%d while the log was held back, want the heartbeat", m.Class, m.Index)
	}
	g.refuseLog.Store(false)
	drainInOrder(t, b, g, r.sent)
}

// Close returns while a backlog still waits for a peer that takes nothing,
// and a Send after it is refused as closed rather than queued.
func TestCloseWithBacklog(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 100000)}
	g.refuseLog.Store(true)
	cfg := Config{
		DDS:              dds.Config{Domain: 1 + uint32(os.Getpid()%90), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second, WhcHigh: 64 << 10},
		ReaderMaxSamples: 8,
		Batch:            4,
	}
	a, _ := batchPair(t, cfg, g)
	payload := make([]byte, 8<<10)
	for i := 0; a.Stats().SendBlocked < 3; i++ {
		if i == 1000 {
			t.Fatal("1000 sends of 8 KiB never reached a 64 KiB high-water mark")
		}
		if err := a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a backlog waited")
	}
	if err := a.Send(&transport.Message{Class: transport.Log, Payload: payload}); err != transport.ErrClosed {
		t.Fatalf("Send after Close: %v, want ErrClosed", err)
	}
}

// A wake of the consumer takes only from the readers that were notified
// (or hold a refused batch): every take is a cgo call under the reader's
// lock, and a round trip of the replication path pays the takes of both
// ends. Each message here is received before the next is sent and the
// consumer resumes once more after it (as the replication loop does after
// consuming), so one take per message is what arrives; the bound allows
// one spurious notification per message. Pumping every class on every
// Resume took at least ten per message.
func TestResumeTakesOnlyNotifiedClasses(t *testing.T) {
	g := &gate{got: make(chan *transport.Message, 100)}
	a, b := batchPair(t, Config{DDS: dds.Config{Domain: testDomain(), Interface: "lo", Peers: []string{"127.0.0.1"}, LeaseDuration: time.Second}}, g)
	const k = 20
	before := b.Stats().Takes
	for i := 0; i < k; i++ {
		if err := a.Send(&transport.Message{Class: transport.Log, Index: uint64(i), Payload: []byte{byte(i)}}); err != nil {
			t.Fatal(err)
		}
		if m := next(t, b, g); m.Class != transport.Log || m.Index != uint64(i) {
			t.Fatalf("got %s #%d, want log #%d", m.Class, m.Index, i)
		}
		b.Resume()
	}
	if takes := b.Stats().Takes - before; takes > 2*k {
		t.Errorf("%d takes for %d messages of one class, want at most %d", takes, k, 2*k)
	} else {
		t.Logf("%d takes for %d messages", takes, k)
	}
}
