package dds

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperProc is a re-executed test binary in responder or ping mode,
// optionally inside a network namespace. Its owner is the test: it is
// stopped in t.Cleanup.
type helperProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *strings.Builder
}

func startHelper(t *testing.T, netns, mode string, job helperJob) *helperProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	args := []string{exe, "-test.run=^$"}
	if netns != "" {
		args = append([]string{"ip", "netns", "exec", netns}, args...)
	}
	jb, _ := json.Marshal(job)
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), envHelper+"="+mode, envJob+"="+string(jb))
	h := &helperProc{cmd: cmd, stderr: &strings.Builder{}}
	cmd.Stderr = h.stderr
	if h.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	h.out = bufio.NewReader(stdout)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.stop() })
	return h
}

// line reads one stdout line, failing after timeout.
func (h *helperProc) line(t *testing.T, timeout time.Duration) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		s, _ := h.out.ReadString('\n')
		ch <- strings.TrimSpace(s)
	}()
	select {
	case s := <-ch:
		if s == "" {
			t.Fatalf("helper exited: %s", h.stderr.String())
		}
		return s
	case <-time.After(timeout):
		h.stop()
		t.Fatalf("helper: no output after %v; stderr: %s", timeout, h.stderr.String())
		return ""
	}
}

func (h *helperProc) stop() {
	if h.cmd.ProcessState != nil {
		return
	}
	h.stdin.Close()
	h.cmd.Process.Signal(syscall.SIGCONT)
	h.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		h.cmd.Process.Kill()
		<-done
	}
}

func (h *helperProc) result(t *testing.T, timeout time.Duration) helperResult {
	t.Helper()
	var res helperResult
	if err := json.Unmarshal([]byte(h.line(t, timeout)), &res); err != nil {
		t.Fatal(err)
	}
	h.stop()
	if res.Err != "" {
		t.Fatalf("pinger: %s\nstderr: %s", res.Err, h.stderr.String())
	}
	return res
}

// TestCrossProcessLoopback runs the responder in a child process over
// 127.0.0.1 with unicast discovery and checks ping-pong integrity.
func TestCrossProcessLoopback(t *testing.T) {
	cfg := loopbackCfg(t)
	resp := startHelper(t, "", "respond", helperJob{Cfg: cfg})
	if s := resp.line(t, 10*time.Second); s != "ready" {
		t.Fatalf("responder: %q", s)
	}
	p, err := NewParticipant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, opt := range []PerfOptions{{Verify: true}, {Verify: true, Inline: true}, {Verify: true, Mode: ReceiveListener}} {
		for _, sz := range []int{0, 64, 1024, 16384, 65536} {
			st, err := PingPong(ctx, p, opt, sz, 50)
			if err != nil {
				t.Fatalf("%+v size %d: %v", opt, sz, err)
			}
			if st.Count != 50 || st.P50 <= 0 {
				t.Fatalf("bad stats %+v", st)
			}
		}
	}
	st, err := Throughput(ctx, p, PerfOptions{}, 1024, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if st.Count == 0 {
		t.Fatalf("no throughput: %+v", st)
	}
}

// TestWriteTimeout freezes the peer (SIGSTOP) so nothing is acknowledged:
// once the writer history reaches WhcHigh, Write must return ErrTimeout.
func TestWriteTimeout(t *testing.T) {
	cfg := loopbackCfg(t)
	cfg.WhcHigh = 64 << 10
	resp := startHelper(t, "", "respond", helperJob{Cfg: cfg})
	if s := resp.line(t, 10*time.Second); s != "ready" {
		t.Fatalf("responder: %q", s)
	}
	p, err := NewParticipant(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	w, err := p.NewWriter(PerfPingTopic, QoS{MaxBlockingTime: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitMatched(t, ctx, w)
	if err := resp.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer resp.cmd.Process.Signal(syscall.SIGCONT)
	payload := make([]byte, 8192)
	var werr error
	n := 0
	for ; n < 1000 && werr == nil; n++ {
		werr = w.Write(&Header{Kind: perfData}, payload)
	}
	if !errors.Is(werr, ErrTimeout) {
		t.Fatalf("after %d writes: err=%v, want ErrTimeout", n, werr)
	}
	var de *Error
	if !errors.As(werr, &de) || de.Op != "dds_write" {
		t.Fatalf("error %#v", werr)
	}
	t.Logf("ErrTimeout after %d x 8 KiB writes (WhcHigh 64 KiB): %v", n, werr)
	if n*8192 < 64<<10 {
		t.Fatalf("timed out before reaching the high-water mark")
	}
}
