package etcdctl

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

const (
	envTarget  = "DYAD_ETCDCTL_TARGET"
	envCtlBin  = "DYAD_ETCDCTL_BIN"
	envUtlBin  = "DYAD_ETCDUTL_BIN"
	cmdTimeout = 30 * time.Second
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// ctl runs one etcdctl binary against one server.
type ctl struct {
	t     *testing.T
	bin   string
	srv   *testutil.Server
	major int
	minor int
}

// newCtl starts a fresh server (the suite's target) and returns an etcdctl
// driver for it.
func newCtl(t *testing.T, opts ...testutil.Option) *ctl {
	t.Helper()
	bin := testutil.RequireBinary(t, envOr(envCtlBin, "etcdctl"))
	srv := testutil.Start(t, testutil.TargetFromEnv(envTarget), opts...)
	c := &ctl{t: t, bin: bin, srv: srv}
	c.major, c.minor = c.version()
	return c
}

func envOr(key, def string) string {
	if v := strings.TrimSpace(os.Getenv(key)); v != "" {
		return v
	}
	return def
}

var versionRE = regexp.MustCompile(`etcdctl version: (\d+)\.(\d+)\.`)

func (c *ctl) version() (int, int) {
	out, err := exec.Command(c.bin, "version").CombinedOutput()
	if err != nil {
		c.t.Fatalf("%s version: %v\n%s", c.bin, err, out)
	}
	m := versionRE.FindStringSubmatch(string(out))
	if m == nil {
		c.t.Fatalf("cannot parse etcdctl version from %q", out)
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return major, minor
}

// atLeast reports whether the etcdctl binary is at least major.minor.
func (c *ctl) atLeast(major, minor int) bool {
	return c.major > major || c.major == major && c.minor >= minor
}

// requireCtl skips a case that exercises a flag the etcdctl binary lacks.
func (c *ctl) requireCtl(t *testing.T, major, minor int, what string) {
	t.Helper()
	if !c.atLeast(major, minor) {
		t.Skipf("%s needs etcdctl >= %d.%d (driving %d.%d)", what, major, minor, c.major, c.minor)
	}
}

type result struct {
	stdout, stderr string
	err            error
}

func (r result) String() string {
	return fmt.Sprintf("err=%v\nstdout:\n%s\nstderr:\n%s", r.err, r.stdout, r.stderr)
}

func (c *ctl) cmd(ctx context.Context, args ...string) *exec.Cmd {
	full := append([]string{"--endpoints=" + c.srv.Endpoint(), "--dial-timeout=5s", "--command-timeout=20s"}, args...)
	cmd := exec.CommandContext(ctx, c.bin, full...)
	// etcdctl 3.4 speaks v3 by default and 3.6 warns about ETCDCTL_API, so
	// the variable is left unset; other ETCDCTL_* settings must not leak in.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCDCTL_") {
			env = append(env, kv)
		}
	}
	cmd.Env = env
	return cmd
}

// runIn runs etcdctl with stdin and returns what it printed.
func (c *ctl) runIn(stdin string, args ...string) result {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := c.cmd(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	err := cmd.Run()
	return result{stdout: out.String(), stderr: errb.String(), err: err}
}

func (c *ctl) run(args ...string) result {
	c.t.Helper()
	return c.runIn("", args...)
}

// ok runs etcdctl, fails the test on a non-zero exit, and returns stdout.
func (c *ctl) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := c.run(args...)
	if r.err != nil {
		t.Fatalf("etcdctl %s: %s", strings.Join(args, " "), r)
	}
	return r.stdout
}

// expect runs etcdctl and asserts its exact stdout.
func (c *ctl) expect(t *testing.T, want string, args ...string) {
	t.Helper()
	if got := c.ok(t, args...); got != want {
		t.Errorf("etcdctl %s\n got: %q\nwant: %q", strings.Join(args, " "), got, want)
	}
}

// expectErr runs etcdctl, asserts a non-zero exit and that stderr contains
// the "Error: ..." line want.
func (c *ctl) expectErr(t *testing.T, want string, args ...string) {
	t.Helper()
	r := c.run(args...)
	if r.err == nil {
		t.Fatalf("etcdctl %s succeeded, want error %q\n%s", strings.Join(args, " "), want, r)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("etcdctl %s: stderr does not contain %q\n%s", strings.Join(args, " "), want, r)
	}
}

// json runs etcdctl with -w json and decodes stdout into v.
func (c *ctl) json(t *testing.T, v any, args ...string) {
	t.Helper()
	out := c.ok(t, append(args, "-w", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("etcdctl %s -w json: decoding %q: %v", strings.Join(args, " "), out, err)
	}
}

// put writes key=value and returns the revision of the write.
func (c *ctl) put(t *testing.T, key, value string, extra ...string) int64 {
	t.Helper()
	var resp struct {
		Header header `json:"header"`
	}
	c.json(t, &resp, append([]string{"put", key, value}, extra...)...)
	return resp.Header.Revision
}

// rev returns the server's current revision, from a Range's header.
func (c *ctl) rev(t *testing.T) int64 {
	t.Helper()
	var resp getResp
	c.json(t, &resp, "get", "rev-probe-nonexistent-key")
	return resp.Header.Revision
}

// Decoded -w json shapes (etcdctl prints gogo/protobuf structs with
// encoding/json, so bytes are base64 and field names are the proto tags).
type header struct {
	ClusterID uint64 `json:"cluster_id"`
	MemberID  uint64 `json:"member_id"`
	Revision  int64  `json:"revision"`
	RaftTerm  uint64 `json:"raft_term"`
}

type kv struct {
	Key            []byte `json:"key"`
	CreateRevision int64  `json:"create_revision"`
	ModRevision    int64  `json:"mod_revision"`
	Version        int64  `json:"version"`
	Value          []byte `json:"value"`
	Lease          int64  `json:"lease"`
}

type getResp struct {
	Header header `json:"header"`
	Kvs    []kv   `json:"kvs"`
	More   bool   `json:"more"`
	Count  int64  `json:"count"`
}

// bg is an etcdctl process running in the background (watch, keep-alive).
type bg struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
	errb   bytes.Buffer
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// start runs etcdctl in the background; it is killed on test cleanup.
func (c *ctl) start(t *testing.T, args ...string) *bg {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &bg{cancel: cancel, done: make(chan struct{})}
	b.cmd = c.cmd(ctx, args...)
	b.cmd.Stdout = lockedWriter{&b.mu, &b.out}
	b.cmd.Stderr = lockedWriter{&b.mu, &b.errb}
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.cmd.Start(); err != nil {
		cancel()
		t.Fatalf("starting etcdctl %s: %v", strings.Join(args, " "), err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	t.Cleanup(b.stop)
	return b
}

func (b *bg) stop() {
	b.cancel()
	<-b.done
}

func (b *bg) stdout() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.out.String()
}

func (b *bg) stderr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.errb.String()
}

// waitOutput polls until stdout is at least as long as want (or the process
// exits, or the deadline passes), then asserts it equals want exactly.
func (b *bg) waitOutput(t *testing.T, want string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if len(b.stdout()) >= len(want) {
			break
		}
		select {
		case <-b.done:
			deadline = time.Now()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if got := b.stdout(); got != want {
		t.Errorf("background etcdctl %v\n got: %q\nwant: %q\nstderr: %s", b.cmd.Args[1:], got, want, b.stderr())
	}
}

// waitLines polls until stdout has n complete lines and returns them.
func (b *bg) waitLines(t *testing.T, n int, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := b.stdout()
		if strings.Count(out, "\n") >= n {
			return strings.SplitN(out, "\n", n+1)[:n]
		}
		if time.Now().After(deadline) {
			t.Fatalf("background etcdctl %v: want %d lines within %v, have %q; stderr: %s", b.cmd.Args[1:], n, timeout, out, b.stderr())
		}
		select {
		case <-b.done:
			deadline = time.Now()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// waitFunc polls until done(stdout) is true, or fails the test at timeout.
func (b *bg) waitFunc(t *testing.T, timeout time.Duration, done func(out string) bool) string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out := b.stdout()
		if done(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("background etcdctl %v: condition not met within %v; stdout %q; stderr: %s", b.cmd.Args[1:], timeout, out, b.stderr())
		}
		select {
		case <-b.done:
			deadline = time.Now()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// eventually polls f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not true within %v: %v", timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// lines joins its arguments as newline-terminated lines.
func lines(ls ...string) string {
	if len(ls) == 0 {
		return ""
	}
	return strings.Join(ls, "\n") + "\n"
}

func jsonDecode(s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return fmt.Errorf("decoding %q: %w", s, err)
	}
	return nil
}
