package shaper

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

const (
	queueLen = 8192    // frames held per port; more are dropped (tail drop)
	readBuf  = 1 << 18 // > the largest GSO frame plus its virtio-net header
	netnsDir = "/run/netns"
)

// Fault is what a Hub does to the frames arriving on one port, that is to
// one direction of a link: the frames a zone sends.
type Fault struct {
	Down  bool          // every frame is dropped
	Delay time.Duration // added to every frame
	Loss  float64       // percentage of frames dropped (0..100)
	// Reorder is the percentage of frames (0..100) sent at once instead of
	// after Delay, overtaking the delayed ones (netem's "reorder"). It
	// needs a Delay to reorder anything.
	Reorder float64
}

type frame struct {
	data []byte
	due  time.Time
}

// Hub moves frames between its ports (see the package comment).
type Hub struct {
	files  []*os.File // AF_PACKET sockets bound to the ports
	queues []chan frame
	// express holds the frames Fault.Reorder sends at once: the writer
	// sends them while it waits for a delayed frame of queues.
	express []chan frame
	stop    chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex // guards faults and active
	faults []Fault    // by the port the frames arrive on
	active bool       // false: discard everything
}

// Open opens packet sockets on ports (interface names in namespace ns,
// empty for the caller's own) and starts a reader and a writer per port.
// The Hub discards every frame until Set makes it active.
func Open(ns string, ports []string) (*Hub, error) {
	if len(ports) < 2 {
		return nil, errors.New("shaper: a hub needs at least two ports")
	}
	h := &Hub{stop: make(chan struct{}), faults: make([]Fault, len(ports))}
	for _, port := range ports {
		fd, err := openPacketSocket(ns, port)
		if err != nil {
			for _, o := range h.files {
				o.Close()
			}
			return nil, err
		}
		// Non-blocking fds become pollable Files: Close unblocks a Read.
		h.files = append(h.files, os.NewFile(uintptr(fd), fmt.Sprintf("packet:%s/%s", ns, port)))
		h.queues = append(h.queues, make(chan frame, queueLen))
		h.express = append(h.express, make(chan frame, queueLen))
	}
	for i := range ports {
		h.wg.Go(func() { h.read(i) })
		h.wg.Go(func() { h.write(i) })
	}
	return h, nil
}

// Set changes the faults (one per port, in Open's order; missing ones are
// zero) and whether frames are forwarded at all. A change applies to the
// frames that arrive from then on.
func (h *Hub) Set(faults []Fault, active bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.faults)
	copy(h.faults, faults)
	h.active = active
}

// Close stops the goroutines and closes the sockets; queued frames are
// dropped.
func (h *Hub) Close() {
	close(h.stop)
	for _, f := range h.files {
		f.Close()
	}
	h.wg.Wait()
}

func (h *Hub) read(port int) {
	buf := make([]byte, readBuf)
	for {
		n, err := h.files[port].Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			// ENETDOWN and the like while links change: keep going unless
			// the hub is closing.
			select {
			case <-h.stop:
				return
			case <-time.After(time.Millisecond):
				continue
			}
		}
		now := time.Now()
		h.mu.Lock()
		fault, active := h.faults[port], h.active
		h.mu.Unlock()
		if !active || fault.Down || (fault.Loss > 0 && rand.Float64()*100 < fault.Loss) {
			continue
		}
		fr := frame{data: append([]byte(nil), buf[:n]...), due: now.Add(fault.Delay)}
		q := h.queues[port]
		if fault.Reorder > 0 && rand.Float64()*100 < fault.Reorder {
			q, fr.due = h.express[port], now
		}
		select {
		case q <- fr:
		default: // queue full: drop, as a full qdisc does
		}
	}
}

// write sends the frames that arrived on port, when due, to every other
// port. Frames of one port share one delay, so they leave in arrival order
// (but for Reorder's express frames).
func (h *Hub) write(port int) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var fr frame
		select {
		case <-h.stop:
			return
		case fr = <-h.queues[port]:
		case x := <-h.express[port]:
			if !h.send(port, x) {
				return
			}
			continue
		}
		// Go's timers are only as fine as the netpoller's millisecond
		// wait: a 0.5 ms delay would take about 1 ms. The timer covers
		// all but the last coarseWait, a nanosleep of this goroutine's
		// thread the rest (frames that arrive meanwhile queue behind).
		if d := time.Until(fr.due) - coarseWait; d > 0 {
			timer.Reset(d)
		wait:
			for {
				select {
				case <-h.stop:
					return
				case <-timer.C:
					break wait
				case x := <-h.express[port]: // overtakes fr
					if !h.send(port, x) {
						return
					}
				}
			}
		}
		if d := time.Until(fr.due); d > 0 {
			sleepFine(d)
		}
		if !h.send(port, fr) {
			return
		}
	}
}

// coarseWait is how much of a frame's delay is slept by sleepFine rather
// than waited for on a timer.
const coarseWait = 2 * time.Millisecond

// sleepFine sleeps d in the kernel (nanosleep), blocking the thread, to a
// precision of tens of microseconds.
func sleepFine(d time.Duration) {
	ts := unix.NsecToTimespec(d.Nanoseconds())
	for {
		var rem unix.Timespec
		if err := unix.Nanosleep(&ts, &rem); err != unix.EINTR {
			return
		}
		ts = rem
	}
}

// send writes fr to every port but from, unless the hub is inactive; false
// means a socket is closed and the writer must stop.
func (h *Hub) send(from int, fr frame) bool {
	h.mu.Lock()
	active := h.active
	h.mu.Unlock()
	if !active {
		return true
	}
	for i, out := range h.files {
		if i == from {
			continue
		}
		// Other write errors (ENOBUFS, a port going down) lose the frame,
		// as a real link would.
		if _, err := out.Write(fr.data); errors.Is(err, os.ErrClosed) {
			return false
		}
	}
	return true
}

// openPacketSocket creates, inside namespace ns, a non-blocking AF_PACKET
// socket bound to interface ifname that sees every frame arriving there
// (not the ones it sends itself) with a virtio-net header.
func openPacketSocket(ns, ifname string) (int, error) {
	var fd int
	err := InNetns(ns, func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
		if err != nil {
			return fmt.Errorf("AF_PACKET socket: %w", err)
		}
		for _, o := range []struct {
			level, opt, val int
			what            string
		}{
			{unix.SOL_PACKET, unix.PACKET_VNET_HDR, 1, "PACKET_VNET_HDR"},
			{unix.SOL_PACKET, unix.PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING"},
			{unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8 << 20, "SO_RCVBUFFORCE"},
			{unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, 8 << 20, "SO_SNDBUFFORCE"},
		} {
			if err := unix.SetsockoptInt(fd, o.level, o.opt, o.val); err != nil {
				unix.Close(fd)
				return fmt.Errorf("setsockopt %s: %w", o.what, err)
			}
		}
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index}); err != nil {
			unix.Close(fd)
			return fmt.Errorf("bind to %s: %w", ifname, err)
		}
		return nil
	})
	return fd, err
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// InNetns runs fn on an OS thread that has joined network namespace ns (by
// name, as ip netns knows it; empty: the caller's own), then returns the
// thread to the caller's namespace. If returning fails the thread is left
// locked, so the Go runtime discards it when the goroutine exits instead of
// reusing it. Threads the runtime creates meanwhile do not inherit ns:
// since Go 1.10, a locked thread hands thread creation to a clean template
// thread.
func InNetns(ns string, fn func() error) error {
	if ns == "" {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join(netnsDir, ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := fn()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- errors.Join(ferr, fmt.Errorf("returning from namespace %s: %w", ns, err))
			return // still locked: the thread dies with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}
