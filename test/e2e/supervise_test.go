package e2e

import (
	"sync"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// supervisor keeps one process of a zone running, as kubelet (static
// pods) or systemd does on a real control-plane node: kube-controller-manager
// and kube-scheduler exit by design when they lose their leader lease
// (which the short timings of these tests make likely on a loaded
// machine), and are expected to be restarted.
//
// The supervisor's goroutine is owned by the supervisor: stop ends it and
// then kills the process; site registers stop on cleanup before the zones
// are torn down.
type supervisor struct {
	s    *site
	zone testutil.Zone
	bin  string
	args []string
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex
	proc     *testutil.Proc
	restarts int
}

// supervise starts bin in zone z and restarts it whenever it exits, until
// stopped.
func (s *site) supervise(z testutil.Zone, bin string, args ...string) *supervisor {
	sv := &supervisor{s: s, zone: z, bin: bin, args: args, stop: make(chan struct{}), done: make(chan struct{})}
	sv.proc = s.net.StartInZone(z, bin, args...)
	go sv.run()
	s.mu.Lock()
	s.supervisors = append(s.supervisors, sv)
	s.mu.Unlock()
	return sv
}

func (sv *supervisor) run() {
	defer close(sv.done)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-sv.stop:
			return
		case <-t.C:
		}
		p := sv.current()
		if !p.Exited() {
			continue
		}
		select {
		case <-sv.stop:
			return
		default:
		}
		sv.s.t.Logf("zone %v: %s exited (%v); restarting it", sv.zone, p.LogPath(), p.ExitErr())
		np := sv.s.net.StartInZone(sv.zone, sv.bin, sv.args...)
		sv.mu.Lock()
		sv.proc = np
		sv.restarts++
		sv.mu.Unlock()
	}
}

// kill stops supervising and kills the process (SIGKILL). Idempotent.
func (sv *supervisor) kill() {
	select {
	case <-sv.stop:
	default:
		close(sv.stop)
	}
	<-sv.done
	sv.current().Kill9()
}

// current is the process now running under sv (the last one started).
func (sv *supervisor) current() *testutil.Proc {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.proc
}

// Restarts is how often the process was restarted.
func (sv *supervisor) Restarts() int {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.restarts
}

// restarts counts the restarts of every supervised process of the site.
func (s *site) restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, sv := range s.supervisors {
		n += sv.Restarts()
	}
	return n
}
