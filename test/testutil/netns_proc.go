package testutil

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	procLogTailLines = 200
	procTermGrace    = 10 * time.Second
)

// ErrStillRunning is returned by Proc.Wait when the process outlives the
// timeout.
var ErrStillRunning = errors.New("process still running")

// Proc is a process started by Zones.StartInZone.
type Proc struct {
	zone    Zone
	name    string // base name of the binary
	cmd     *exec.Cmd
	logPath string
	logFile *os.File
	done    chan struct{} // closed once the process has been reaped

	mu      sync.Mutex
	waitErr error
}

func startProc(ns string, zone Zone, seq int, dir string, env []string, bin string, args []string) (*Proc, error) {
	name := filepath.Base(bin)
	logPath := filepath.Join(dir, fmt.Sprintf("%v-%d-%s.log", zone, seq, name))
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== testutil: zone %v (%s): %s %s\n", zone, ns, bin, strings.Join(args, " "))
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// Pdeathsig survives ip's execve of bin (same credentials), so bin dies
	// with the test binary. Its own process group lets Kill9 reach children.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	p := &Proc{zone: zone, name: name, cmd: cmd, logPath: logPath, logFile: f, done: make(chan struct{})}
	// The reaper ends when the process does; Kill9 (run for every Proc on
	// cleanup) waits for it.
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id. ip netns exec execs the binary, so this is the
// binary's own pid (not a wrapper's) once it has started.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// CPUTime is the CPU time (user and system) the process has used so far;
// an error once it has been reaped.
func (p *Proc) CPUTime() (time.Duration, error) { return procCPU(p.Pid()) }

// Zone is the zone the process runs in.
func (p *Proc) Zone() Zone { return p.zone }

// LogPath is the file holding the process's stdout and stderr.
func (p *Proc) LogPath() string { return p.logPath }

// Exited reports whether the process has exited (and been reaped).
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ExitErr is the result of waiting for the process: nil for exit status 0,
// an *exec.ExitError otherwise. Meaningful once Exited.
func (p *Proc) ExitErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Signal sends sig to the process. It fails once the process has exited.
func (p *Proc) Signal(sig syscall.Signal) error {
	if p.Exited() {
		return os.ErrProcessDone
	}
	return p.cmd.Process.Signal(sig)
}

// Stop freezes the process with SIGSTOP (it keeps its sockets; the kernel
// still completes TCP handshakes for it).
func (p *Proc) Stop() error { return p.Signal(syscall.SIGSTOP) }

// Cont resumes a stopped process with SIGCONT.
func (p *Proc) Cont() error { return p.Signal(syscall.SIGCONT) }

// Kill9 sends SIGKILL to the process's group and waits until it is reaped.
// It is a no-op for a process that has already exited.
func (p *Proc) Kill9() {
	if !p.Exited() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		_ = p.cmd.Process.Kill()
	}
	<-p.done
}

// Term sends SIGTERM (and SIGCONT, in case the process is stopped) and waits
// for it to exit, escalating to SIGKILL after 10 s. It returns nil for a
// clean exit: status 0, or death by the SIGTERM itself (a process without
// a handler).
func (p *Proc) Term() error {
	if p.Exited() {
		return p.cleanExit()
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return p.cleanExit()
	case <-time.After(procTermGrace):
	}
	p.Kill9()
	return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.name, procTermGrace)
}

func (p *Proc) cleanExit() error {
	err := p.ExitErr()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return err
}

// Wait waits at most timeout for the process to exit and returns ExitErr,
// or ErrStillRunning.
func (p *Proc) Wait(timeout time.Duration) error {
	select {
	case <-p.done:
		return p.ExitErr()
	case <-time.After(timeout):
		return ErrStillRunning
	}
}

// LogTail returns the last n lines of the process's log.
func (p *Proc) LogTail(n int) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	ring := make([]string, 0, n)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if len(ring) == n {
			ring = ring[1:]
		}
		ring = append(ring, sc.Text())
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		ring = append(ring, fmt.Sprintf("(reading log: %v)", err))
	}
	return strings.Join(ring, "\n")
}
