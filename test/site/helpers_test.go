package site

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/bench/proc"
	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// startupWait bounds how long a node may take to answer after it starts;
// generous because the machine may be loaded. It is a give-up bound for a
// process that never comes up, not a performance assertion.
const startupWait = 90 * time.Second

// dyadCerts runs `dyad certs` into a fresh directory.
func dyadCerts(t *testing.T, bin string, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "pki")
	out, err := exec.Command(bin, append([]string{"certs", "--dir", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("dyad certs: %v\n%s", err, out)
	}
	return dir
}

// freePorts returns n free ports on 127.0.0.1.
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	ps, err := proc.FreePorts(n)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]string, n)
	for i, p := range ps {
		out[i] = strconv.Itoa(p)
	}
	return out
}

// process is a started dyad; the test's cleanup stops it and shows its log
// if the test failed.
type process struct {
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

func start(t *testing.T, name string, argv, env []string) *process {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), name+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { cmd.Wait(); logf.Close(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("---- %s log ----\n%s", name, b)
		}
	})
	return p
}

// logText is the process's log so far.
func (p *process) logText(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// get fetches url until it answers 200, the process exits, or startupWait
// passes, and returns the body of the 200.
func (p *process) get(t *testing.T, c *http.Client, url string) []byte {
	t.Helper()
	deadline := time.Now().Add(startupWait)
	var last string
	for {
		resp, err := c.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return body
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		select {
		case <-p.exited:
			t.Fatalf("GET %s: the process exited (last answer: %s)", url, last)
		case <-time.After(100 * time.Millisecond): // poll interval
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: no 200 within %v (last answer: %s)", url, startupWait, last)
		}
	}
}

// tlsClient trusts caFile and presents certFile/keyFile.
func tlsClient(t *testing.T, caFile, certFile, keyFile string) (*http.Client, *tls.Config) {
	t.Helper()
	cfg, err := (transport.TLSInfo{TrustedCAFile: caFile, CertFile: certFile, KeyFile: keyFile}).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	// Offer h2 as curl and Go's default client do: the client port must
	// still answer HTTP/1.1.
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg.Clone(), ForceAttemptHTTP2: true}}, cfg
}

// checkVersion does what kubeadm's external-etcd preflight does with
// /version: decode etcdserver and require a plain etcd release it accepts.
func checkVersion(t *testing.T, body []byte) {
	t.Helper()
	var v struct {
		Server  string `json:"etcdserver"`
		Cluster string `json:"etcdcluster"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("/version %q: %v", body, err)
	}
	parts := strings.Split(v.Server, ".")
	if len(parts) != 3 {
		t.Fatalf("/version etcdserver %q is not MAJOR.MINOR.PATCH", v.Server)
	}
	var n [3]int
	for i, s := range parts {
		x, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("/version etcdserver %q: %v", v.Server, err)
		}
		n[i] = x
	}
	if n[0] != 3 || n[1] < 5 || (n[1] == 5 && n[2] < 13) {
		t.Fatalf("/version etcdserver %q: want a plain etcd >= 3.5.13", v.Server)
	}
	if v.Cluster != fmt.Sprintf("%d.%d.0", n[0], n[1]) {
		t.Errorf("/version etcdcluster %q, want %d.%d.0", v.Cluster, n[0], n[1])
	}
}

// checkHealth wants etcd's {"health":"true"}.
func checkHealth(t *testing.T, body []byte) {
	t.Helper()
	var h struct{ Health string }
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		t.Fatalf("/health %q (%v), want health true", body, err)
	}
}

// putGet writes a key on one endpoint and reads it on another.
func putGet(t *testing.T, cfg *tls.Config, putEP, getEP string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), startupWait)
	defer cancel()
	dial := func(ep string) *clientv3.Client {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: cfg, DialTimeout: 10 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	key, val := "/site/"+t.Name(), "written on "+putEP
	if _, err := dial(putEP).Put(ctx, key, val); err != nil {
		t.Fatalf("put on %s: %v", putEP, err)
	}
	resp, err := dial(getEP).Get(ctx, key)
	if err != nil {
		t.Fatalf("get on %s: %v", getEP, err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != val {
		t.Fatalf("get on %s: %v, want %q", getEP, resp.Kvs, val)
	}
}
