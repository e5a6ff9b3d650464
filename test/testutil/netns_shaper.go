package testutil

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

// The userspace shaper exists because some kernels (minimal VM kernels
// such as Firecracker's) are built without sch_netem. It needs only
// AF_PACKET and a bridge. While any fault is set, the two veth ports in
// namespace m leave the bridge and a forwarder in the test process moves
// frames between them, dropping and delaying them per direction.
//
// Frames are read and written with a virtio-net header (PACKET_VNET_HDR), so
// GSO super-frames and frames with a pending (CHECKSUM_PARTIAL) checksum,
// which veths carry, pass through unchanged instead of being truncated or
// delivered with a wrong checksum.

const (
	fwdQueueLen = 8192    // frames held per direction; more are dropped (tail drop)
	fwdReadBuf  = 1 << 18 // > the largest GSO frame plus its virtio-net header
)

type fwdFrame struct {
	data []byte
	due  time.Time
}

// forwarder moves frames between the ports toward zone a (index 0) and zone
// b (index 1). Direction i carries frames sent by zone i.
type forwarder struct {
	files  [2]*os.File // AF_PACKET sockets bound to the ports
	queues [2]chan fwdFrame
	// express holds the frames Fault.Reorder sends at once: the writer
	// sends them while it waits for a delayed frame of queues.
	express [2]chan fwdFrame
	stop    chan struct{}
	wg      sync.WaitGroup

	mu     sync.Mutex
	faults [2]Fault
	active bool // false: discard everything (the bridge is forwarding)
}

// startForwarder opens packet sockets on the two ports in namespace ns and
// starts a reader and a writer per direction, initially discarding.
func startForwarder(ns string, ports [2]string) (*forwarder, error) {
	f := &forwarder{stop: make(chan struct{})}
	for i, port := range ports {
		fd, err := openPacketSocket(ns, port)
		if err != nil {
			for _, o := range f.files[:i] {
				o.Close()
			}
			return nil, err
		}
		// Non-blocking fds become pollable Files: Close unblocks a Read.
		f.files[i] = os.NewFile(uintptr(fd), fmt.Sprintf("packet:%s/%s", ns, port))
		f.queues[i] = make(chan fwdFrame, fwdQueueLen)
		f.express[i] = make(chan fwdFrame, fwdQueueLen)
	}
	for i := range 2 {
		f.wg.Go(func() { f.read(i) })
		f.wg.Go(func() { f.write(i) })
	}
	return f, nil
}

// set changes the faults and whether frames are forwarded at all.
func (f *forwarder) set(faults [2]Fault, active bool) {
	f.mu.Lock()
	f.faults, f.active = faults, active
	f.mu.Unlock()
}

// close stops the goroutines and closes the sockets; queued frames are
// dropped.
func (f *forwarder) close() {
	close(f.stop)
	for _, file := range f.files {
		file.Close()
	}
	f.wg.Wait()
}

func (f *forwarder) read(dir int) {
	buf := make([]byte, fwdReadBuf)
	for {
		n, err := f.files[dir].Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			// ENETDOWN and the like while links change: keep going unless
			// we are stopping.
			select {
			case <-f.stop:
				return
			case <-time.After(time.Millisecond):
				continue
			}
		}
		now := time.Now()
		f.mu.Lock()
		fault, active := f.faults[dir], f.active
		f.mu.Unlock()
		if !active || fault.Down || (fault.Loss > 0 && rand.Float64()*100 < fault.Loss) {
			continue
		}
		fr := fwdFrame{data: append([]byte(nil), buf[:n]...), due: now.Add(fault.Delay)}
		q := f.queues[dir]
		if fault.Reorder > 0 && rand.Float64()*100 < fault.Reorder {
			q, fr.due = f.express[dir], now
		}
		select {
		case q <- fr:
		default: // queue full: drop, as a full qdisc does
		}
	}
}

func (f *forwarder) write(dir int) {
	out := f.files[1-dir]
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		var fr fwdFrame
		select {
		case <-f.stop:
			return
		case fr = <-f.queues[dir]:
		case x := <-f.express[dir]:
			if !f.send(out, x) {
				return
			}
			continue
		}
		if d := time.Until(fr.due); d > 0 {
			timer.Reset(d)
		wait:
			for {
				select {
				case <-f.stop:
					return
				case <-timer.C:
					break wait
				case x := <-f.express[dir]: // overtakes fr
					if !f.send(out, x) {
						return
					}
				}
			}
		}
		if !f.send(out, fr) {
			return
		}
	}
}

// send writes fr unless the forwarder is inactive; false means the socket
// is closed and the writer must stop.
func (f *forwarder) send(out *os.File, fr fwdFrame) bool {
	f.mu.Lock()
	active := f.active
	f.mu.Unlock()
	if !active {
		return true
	}
	_, err := out.Write(fr.data)
	// Other write errors (ENOBUFS, a port going down) lose the frame, as a
	// real link would.
	return !errors.Is(err, os.ErrClosed)
}

// openPacketSocket creates, inside namespace ns, a non-blocking AF_PACKET
// socket bound to interface ifname that sees every frame arriving there
// (not the ones it sends itself) with a virtio-net header.
func openPacketSocket(ns, ifname string) (int, error) {
	var fd int
	err := inNetns(ns, func() error {
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

// inNetns runs fn on an OS thread that has joined network namespace ns
// (by name, as ip netns knows it), then returns the thread to the caller's
// namespace. If returning fails the thread is left locked, so the Go
// runtime discards it when the goroutine exits instead of reusing it.
// Threads the runtime creates meanwhile do not inherit ns: since Go 1.10,
// a locked thread hands thread creation to a clean template thread.
func inNetns(ns string, fn func() error) error {
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
