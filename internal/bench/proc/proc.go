package proc

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes a child process.
type Spec struct {
	Bin  string
	Args []string
	Env  []string // KEY=VALUE added to the bench's environment
	Dir  string   // working directory; empty: the bench's
	Log  string   // file receiving stdout and stderr (appended)
	// Cred, when set, runs the child as another user (PostgreSQL refuses
	// to run as root).
	Cred *syscall.Credential
}

// Proc is one running or exited child.
type Proc struct {
	spec   Spec
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed once cmd.Wait returned

	mu      sync.Mutex
	waitErr error
}

// Start launches the child described by s.
func Start(s Spec) (*Proc, error) {
	f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== bench: %s %s\n", s.Bin, strings.Join(s.Args, " "))
	cmd := exec.Command(s.Bin, s.Args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Dir = s.Dir
	cmd.Env = append(os.Environ(), s.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true, Credential: s.Cred}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", s.Bin, err)
	}
	p := &Proc{spec: s, cmd: cmd, log: f, exited: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.waitErr = err
		p.mu.Unlock()
		f.Close()
		close(p.exited)
	}()
	return p, nil
}

// Exited is closed when the child has exited and been reaped.
func (p *Proc) Exited() <-chan struct{} { return p.exited }

// Pid is the child's process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Err is the child's exit status once it has exited.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// Stop sends SIGTERM, waits up to grace, then SIGKILLs. It returns once the
// child is reaped. An error means the child had to be killed.
func (p *Proc) Stop(grace time.Duration) error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return nil
	case <-time.After(grace):
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
	return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.spec.Bin, grace)
}

// Kill sends SIGKILL and waits until the child is reaped.
func (p *Proc) Kill() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// KillGroup sends SIGKILL to the child's whole process group (it leads one:
// Setpgid), so helpers it forked (PostgreSQL's backends) die with it as on a
// machine's loss, and waits until the child is reaped.
func (p *Proc) KillGroup() {
	select {
	case <-p.exited:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.exited
}

// Spec is what the child was started with (to start it again).
func (p *Proc) Spec() Spec { return p.spec }

// LogTail returns up to n bytes from the end of the child's log.
func (p *Proc) LogTail(n int64) string { return FileTail(p.spec.Log, n) }

// FileTail returns up to n bytes from the end of a file, for error messages.
func FileTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := max(st.Size()-n, 0)
	b, _ := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	return string(b)
}

// Output runs a short command (a --version query) and returns its trimmed
// combined output.
func Output(bin string, args ...string) (string, error) {
	out, err := exec.Command(bin, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", bin, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1. They are free
// when returned; a server that loses the race reports "address already in
// use", which callers retry.
func FreePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, errors.Join(errors.New("no free port"), err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
