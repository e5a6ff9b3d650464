package testutil

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/dyad-db/dyad/internal/bench/proc"
)

// Kind tells which implementation a Server runs.
type Kind string

const (
	KindDyad Kind = "dyad"
	KindEtcd Kind = "etcd"
)

// Timeouts used while starting and stopping servers.
const (
	startTimeout = 60 * time.Second
	stopGrace    = 10 * time.Second
	logTailBytes = 16 << 10
)

type config struct {
	name           string
	extraArgs      []string
	env            []string
	progressNotify time.Duration
	dataDir        string
}

// Option changes how a server is started.
type Option func(*config)

// WithArgs appends raw command-line arguments (implementation specific).
func WithArgs(args ...string) Option {
	return func(c *config) { c.extraArgs = append(c.extraArgs, args...) }
}

// WithEnv adds KEY=VALUE pairs to the server's environment.
func WithEnv(kv ...string) Option {
	return func(c *config) { c.env = append(c.env, kv...) }
}

// WithName sets the member name (default "n1").
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// WithDataDir makes the server use dir instead of a fresh temporary one.
func WithDataDir(dir string) Option {
	return func(c *config) { c.dataDir = dir }
}

// WithProgressNotifyInterval sets the period of watch progress notifications,
// translated to each implementation's flag:
// etcd: --experimental-watch-progress-notify-interval (3.4–3.6);
// dyad: --watch-progress-notify-interval (etcd 3.6's non-experimental name).
func WithProgressNotifyInterval(d time.Duration) Option {
	return func(c *config) { c.progressNotify = d }
}

// Server is one running (or stopped) server process.
type Server struct {
	t    testing.TB
	kind Kind
	bin  string
	cfg  config

	dataDir    string
	logPath    string
	clientPort int
	peerPort   int
	metricPort int

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has been waited for
	waitErr error
	logFile *os.File
	starts  int
}

// TargetFromEnv returns the server the calling suite should test: the value
// of suiteEnv if set, else $DYAD_TEST_TARGET, else "dyad".
func TargetFromEnv(suiteEnv string) string {
	if suiteEnv != "" {
		if v := strings.TrimSpace(os.Getenv(suiteEnv)); v != "" {
			return v
		}
	}
	if v := strings.TrimSpace(os.Getenv(EnvTestTarget)); v != "" {
		return v
	}
	return TargetDyad
}

// Start starts the named target: "dyad" runs StartDyad, anything else is an
// etcd binary name for StartEtcd ("etcd-3.6", "etcd-3.5", "etcd-3.4", a path).
func Start(t testing.TB, target string, opts ...Option) *Server {
	t.Helper()
	if target == TargetDyad || target == "" {
		return StartDyad(t, opts...)
	}
	return StartEtcd(t, target, opts...)
}

// StartDyad builds (once) and starts `dyad serve` on free ports.
func StartDyad(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin := BuildDyad(t)
	return startServer(t, KindDyad, bin, opts)
}

// StartEtcd starts a single-member real etcd. binName is resolved with
// ResolveBinary; a missing binary skips the test (fails it under
// DYAD_REQUIRE_PEERS=1).
func StartEtcd(t testing.TB, binName string, opts ...Option) *Server {
	t.Helper()
	bin := RequireBinary(t, binName)
	return startServer(t, KindEtcd, bin, opts)
}

func startServer(t testing.TB, kind Kind, bin string, opts []Option) *Server {
	t.Helper()
	cfg := config{name: "n1"}
	for _, o := range opts {
		o(&cfg)
	}
	base := t.TempDir()
	s := &Server{t: t, kind: kind, bin: bin, cfg: cfg}
	s.dataDir = cfg.dataDir
	if s.dataDir == "" {
		s.dataDir = filepath.Join(base, "data")
	}
	s.logPath = filepath.Join(base, "server.log")
	// Registered after t.TempDir, so it runs before the directory is removed.
	t.Cleanup(s.cleanup)

	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		ports, err := proc.FreePorts(3)
		if err != nil {
			t.Fatalf("testutil: %v", err)
		}
		s.clientPort, s.peerPort, s.metricPort = ports[0], ports[1], ports[2]
		if lastErr = s.start(); lastErr == nil {
			return s
		}
		// A port taken between freePorts and bind shows up as an early exit
		// mentioning the address; anything else is a real failure.
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	t.Fatalf("testutil: starting %s (%s): %v\n--- server log tail ---\n%s", kind, bin, lastErr, s.LogTail())
	return nil
}

func (s *Server) args() []string {
	c := s.Endpoint()
	m := s.MetricsURL()
	var args []string
	switch s.kind {
	case KindDyad:
		args = []string{"serve",
			"--name", s.cfg.name,
			"--data-dir", s.dataDir,
			"--listen-client-urls", c,
			"--advertise-client-urls", c,
			"--listen-metrics-urls", m,
		}
		if s.cfg.progressNotify > 0 {
			args = append(args, "--watch-progress-notify-interval", s.cfg.progressNotify.String())
		}
	case KindEtcd:
		p := fmt.Sprintf("http://127.0.0.1:%d", s.peerPort)
		args = []string{
			"--name", s.cfg.name,
			"--data-dir", s.dataDir,
			"--listen-client-urls", c,
			"--advertise-client-urls", c,
			"--listen-peer-urls", p,
			"--initial-advertise-peer-urls", p,
			"--initial-cluster", s.cfg.name + "=" + p,
			"--listen-metrics-urls", m,
			"--logger", "zap",
		}
		if s.cfg.progressNotify > 0 {
			args = append(args, "--experimental-watch-progress-notify-interval", s.cfg.progressNotify.String())
		}
	}
	return append(args, s.cfg.extraArgs...)
}

// start launches the process and waits until it serves. Caller holds no lock.
func (s *Server) start() error {
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	s.starts++
	fmt.Fprintf(f, "=== testutil: start #%d: %s %s\n", s.starts, s.bin, strings.Join(s.args(), " "))
	cmd := exec.Command(s.bin, s.args()...)
	cmd.Stdout = f
	cmd.Stderr = f
	cmd.Env = append(os.Environ(), s.cfg.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	exited := make(chan struct{})
	s.mu.Lock()
	s.cmd, s.exited, s.logFile, s.waitErr = cmd, exited, f, nil
	s.mu.Unlock()
	go func() {
		err := cmd.Wait()
		s.mu.Lock()
		s.waitErr = err
		s.mu.Unlock()
		close(exited)
	}()
	if err := s.waitReady(exited); err != nil {
		s.Kill()
		return err
	}
	return nil
}

// waitReady polls the client port with Status and a linearizable Get until
// both succeed, the process exits, or startTimeout passes.
func (s *Server) waitReady(exited <-chan struct{}) error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.mu.Lock()
			werr := s.waitErr
			s.mu.Unlock()
			tail := s.LogTail()
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("exited early (%v): address already in use", werr)
			}
			return fmt.Errorf("exited before becoming ready: %v", werr)
		default:
		}
		if lastErr = s.probe(); lastErr == nil {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("not ready after %v: last probe error: %v", startTimeout, lastErr)
}

func (s *Server) probe() error {
	// Cheap check first: a gRPC dial with WithBlock to a closed port waits
	// out its whole DialTimeout, which would dominate fast startups.
	conn, err := net.DialTimeout("tcp", s.HostPort(), 200*time.Millisecond)
	if err != nil {
		return err
	}
	conn.Close()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: time.Second,
		Logger:      zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
	})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := cli.Status(ctx, s.Endpoint()); err != nil {
		return fmt.Errorf("status: %w", err)
	}
	if _, err := cli.Get(ctx, "testutil-readiness-probe"); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	return nil
}

// Pid is the running process's id (0 when it is not running).
func (s *Server) Pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kind reports which implementation runs.
func (s *Server) Kind() Kind { return s.kind }

// Binary is the executable's path.
func (s *Server) Binary() string { return s.bin }

// Endpoint is the client URL, http://127.0.0.1:PORT.
func (s *Server) Endpoint() string { return fmt.Sprintf("http://127.0.0.1:%d", s.clientPort) }

// HostPort is the client address without scheme, 127.0.0.1:PORT.
func (s *Server) HostPort() string { return fmt.Sprintf("127.0.0.1:%d", s.clientPort) }

// MetricsURL is the URL serving /metrics, /health (and /readyz on dyad).
func (s *Server) MetricsURL() string { return fmt.Sprintf("http://127.0.0.1:%d", s.metricPort) }

// Name is the member name.
func (s *Server) Name() string { return s.cfg.name }

// DataDir is the server's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// LogPath is the file receiving the server's stdout and stderr.
func (s *Server) LogPath() string { return s.logPath }

// Client returns a clientv3 client for this server, closed on t.Cleanup.
func (s *Server) Client(t testing.TB) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(s.ClientConfig())
	if err != nil {
		t.Fatalf("testutil: clientv3.New(%s): %v", s.Endpoint(), err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// ClientConfig is the clientv3 configuration Client uses.
func (s *Server) ClientConfig() clientv3.Config {
	return clientv3.Config{
		Endpoints:   []string{s.Endpoint()},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	}
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits for a clean exit, escalating to SIGKILL after
// a grace period. It returns an error when the process had to be killed or
// exited with a non-zero status.
func (s *Server) Stop() error {
	return s.signalAndWait(syscall.SIGTERM, stopGrace)
}

// Kill sends SIGKILL and waits for the process to go away.
func (s *Server) Kill() {
	_ = s.signalAndWait(syscall.SIGKILL, stopGrace)
}

func (s *Server) signalAndWait(sig syscall.Signal, grace time.Duration) error {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return s.finish(nil)
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
		if sig == syscall.SIGKILL {
			return s.finish(nil)
		}
		return s.finish(s.exitErr())
	case <-time.After(grace):
	}
	_ = cmd.Process.Kill()
	<-exited
	return s.finish(fmt.Errorf("did not exit within %v of %v; killed", grace, sig))
}

// exitErr reports an unclean exit after SIGTERM. Exit status 0 is clean, and
// so is death by the SIGTERM itself: etcd re-raises the signal after its
// orderly shutdown (pkg/osutil), so that is how a clean etcd exit looks.
func (s *Server) exitErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waitErr == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(s.waitErr, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGTERM {
			return nil
		}
	}
	return fmt.Errorf("exit: %v", s.waitErr)
}

func (s *Server) finish(err error) error {
	s.mu.Lock()
	if s.logFile != nil {
		s.logFile.Close()
		s.logFile = nil
	}
	s.mu.Unlock()
	return err
}

// Restart stops the server (SIGTERM) if it runs and starts it again with the
// same data dir, ports and flags, waiting until it serves.
func (s *Server) Restart() error {
	if s.Running() {
		if err := s.Stop(); err != nil {
			return fmt.Errorf("stop before restart: %w", err)
		}
	}
	return s.start()
}

// LogTail returns the last few KiB of the server's log.
func (s *Server) LogTail() string {
	f, err := os.Open(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err.Error()
	}
	off := st.Size() - logTailBytes
	if off < 0 {
		off = 0
	}
	b, _ := io.ReadAll(io.NewSectionReader(f, off, st.Size()-off))
	if off > 0 {
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// HTTPGet fetches path (e.g. "/health") from the metrics URL.
func (s *Server) HTTPGet(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.MetricsURL()+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

func (s *Server) cleanup() {
	s.Kill()
	if s.t.Failed() || os.Getenv(EnvKeepLogs) == "1" {
		s.t.Logf("--- %s server log (%s), tail ---\n%s", s.kind, s.logPath, s.LogTail())
	}
}
