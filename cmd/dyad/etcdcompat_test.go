package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// parsedServe is serve's flag set after parsing args, as cobra leaves it
// before RunE.
func parsedServe(t *testing.T, args ...string) (*pflag.FlagSet, *serveFlags) {
	t.Helper()
	f := &serveFlags{}
	fl := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	bindServeFlags(fl, f)
	if err := fl.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fl, f
}

func TestEnvPrecedence(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		env      []string
		wantName string
		wantURLs string
		wantNote string
	}{
		{name: "ETCD_ sets an unset flag", env: []string{"ETCD_NAME=e"}, wantName: "e", wantURLs: "http://127.0.0.1:2379"},
		{name: "DYAD_ wins over ETCD_", env: []string{"ETCD_NAME=e", "DYAD_NAME=d"}, wantName: "d", wantURLs: "http://127.0.0.1:2379", wantNote: "ETCD_NAME by DYAD_NAME"},
		{name: "command line wins", args: []string{"--name", "c"}, env: []string{"ETCD_NAME=e", "DYAD_NAME=d"}, wantName: "c", wantURLs: "http://127.0.0.1:2379", wantNote: "DYAD_NAME by --name"},
		{name: "multi-word flag", env: []string{"ETCD_LISTEN_CLIENT_URLS=http://127.0.0.1:1"}, wantName: "default", wantURLs: "http://127.0.0.1:1"},
		{name: "unknown ETCD_ variable", env: []string{"ETCD_NO_SUCH_FLAG=1"}, wantName: "default", wantURLs: "http://127.0.0.1:2379", wantNote: "ETCD_NO_SUCH_FLAG"},
		{name: "other DYAD_ variables are not flags", env: []string{"DYAD_CACHE=/x"}, wantName: "default", wantURLs: "http://127.0.0.1:2379"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fl, f := parsedServe(t, tc.args...)
			notes, err := applyEnv(fl, tc.env)
			if err != nil {
				t.Fatal(err)
			}
			if f.name != tc.wantName || f.listenClientURLs != tc.wantURLs {
				t.Errorf("name %q urls %q, want %q %q", f.name, f.listenClientURLs, tc.wantName, tc.wantURLs)
			}
			if got := notesText(notes); (tc.wantNote == "") != (got == "") || !strings.Contains(got, tc.wantNote) {
				t.Errorf("notes %q, want one mentioning %q", got, tc.wantNote)
			}
		})
	}
}

func TestEnvBadValue(t *testing.T) {
	fl, _ := parsedServe(t)
	if _, err := applyEnv(fl, []string{"ETCD_MAX_TXN_OPS=many"}); err == nil || !strings.Contains(err.Error(), "ETCD_MAX_TXN_OPS") {
		t.Fatalf("err = %v, want one naming ETCD_MAX_TXN_OPS", err)
	}
}

func notesText(ns []note) string {
	var sb strings.Builder
	for _, n := range ns {
		fmt.Fprintln(&sb, append([]any{n.msg}, n.args...)...)
	}
	return sb.String()
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "etcd.yaml")
	// etcd's own configuration format: flag names as keys, TLS nested,
	// durations as nanoseconds, null meaning "default".
	conf := `name: infra1
data-dir: /var/lib/x
listen-client-urls: https://127.0.0.1:2379
initial-cluster: infra1=https://127.0.0.1:2380
initial-cluster-state: null
experimental-watch-progress-notify-interval: 5000000000
max-txn-ops: 64
snapshot-count: 10000
enable-v2: false
log-outputs: [stderr]
no-such-key: 1
client-transport-security:
  cert-file: /pki/server.crt
  key-file: /pki/server.key
  client-cert-auth: true
  trusted-ca-file: /pki/ca.crt
peer-transport-security:
  cert-file: /pki/peer.crt
  key-file: /pki/peer.key
  trusted-ca-file: /pki/ca.crt
  client-cert-auth: true
`
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	fl, f := parsedServe(t, "--config-file", path, "--max-request-bytes", "7")
	notes, err := applyConfigFile(fl, path)
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct{ what, got, want string }{
		{"name", f.name, "infra1"},
		{"data-dir", f.dataDir, "/var/lib/x"},
		{"listen-client-urls", f.listenClientURLs, "https://127.0.0.1:2379"},
		{"initial-cluster", f.cluster.initialCluster, "infra1=https://127.0.0.1:2380"},
		{"initial-cluster-state (null keeps the default)", f.cluster.initialClusterState, "new"},
		{"cert-file", f.certFile, "/pki/server.crt"},
		{"trusted-ca-file", f.trustedCAFile, "/pki/ca.crt"},
		{"peer-cert-file", f.cluster.sec.certFile, "/pki/peer.crt"},
		{"peer-trusted-ca-file", f.cluster.sec.trustedCAFile, "/pki/ca.crt"},
		{"peer-client-cert-auth", fl.Lookup("peer-client-cert-auth").Value.String(), "true"},
		{"log-outputs", fl.Lookup("log-outputs").Value.String(), "stderr"},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
	if !f.clientCertAuth || f.maxTxnOps != 64 || f.progressInterval != 5*time.Second {
		t.Errorf("client-cert-auth %v max-txn-ops %d interval %v", f.clientCertAuth, f.maxTxnOps, f.progressInterval)
	}
	// As in etcd, the command line is ignored when a file is given.
	if f.maxRequestBytes != 1.5*1024*1024 {
		t.Errorf("--max-request-bytes from the command line = %d, want the default", f.maxRequestBytes)
	}
	text := notesText(notes)
	for _, want := range []string{"--max-request-bytes", "no-such-key"} {
		if !strings.Contains(text, want) {
			t.Errorf("notes lack %q:\n%s", want, text)
		}
	}
}

func TestConfigFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, conf, want string }{
		{"bad value", "max-txn-ops: lots\n", "max-txn-ops"},
		{"section not a mapping", "client-transport-security: yes\n", "not a mapping"},
		{"not YAML", "name: [\n", "etcd.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "etcd.yaml")
			os.WriteFile(path, []byte(tc.conf), 0o644)
			fl, _ := parsedServe(t)
			if _, err := applyConfigFile(fl, path); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestFeatureGates(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"InitialCorruptCheck=true", 1, false},
		{"InitialCorruptCheck=true, CompactHashCheck=false", 2, false},
		{"", 0, false},
		{"InitialCorruptCheck", 0, true},
		{"InitialCorruptCheck=maybe", 0, true},
		{"=true", 0, true},
	} {
		got, err := parseFeatureGates(tc.in)
		if (err != nil) != tc.wantErr || len(got) != tc.want {
			t.Errorf("parseFeatureGates(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// TestKubeadmFlagsParse: every flag kubeadm v1.36 (and its predecessors)
// writes into etcd's static pod is accepted by serve's flag set.
func TestKubeadmFlagsParse(t *testing.T) {
	args := []string{
		"--advertise-client-urls=https://10.0.0.1:2379", "--cert-file=/p/server.crt", "--client-cert-auth=true",
		"--data-dir=/var/lib/etcd", "--experimental-initial-corrupt-check=true", "--feature-gates=InitialCorruptCheck=true",
		"--experimental-watch-progress-notify-interval=5s", "--watch-progress-notify-interval=5s",
		"--initial-advertise-peer-urls=https://10.0.0.1:2380", "--initial-cluster=n=https://10.0.0.1:2380",
		"--initial-cluster-state=existing", "--key-file=/p/server.key",
		"--listen-client-urls=https://127.0.0.1:2379,https://10.0.0.1:2379", "--listen-metrics-urls=http://127.0.0.1:2381",
		"--listen-peer-urls=https://10.0.0.1:2380", "--name=n", "--peer-cert-file=/p/peer.crt", "--peer-client-cert-auth=true",
		"--peer-key-file=/p/peer.key", "--peer-trusted-ca-file=/p/ca.crt", "--snapshot-count=10000", "--trusted-ca-file=/p/ca.crt",
		"--experimental-corrupt-check-time=240m", "--log-format=console",
	}
	fl, f := parsedServe(t, args...)
	notes, err := f.compat.ignoredNotes(fl)
	if err != nil {
		t.Fatal(err)
	}
	text := notesText(notes)
	for _, ignored := range []string{"--listen-peer-urls", "--initial-advertise-peer-urls", "--snapshot-count", "--peer-client-cert-auth", "--experimental-initial-corrupt-check", "InitialCorruptCheck=true"} {
		if !strings.Contains(text, ignored) {
			t.Errorf("no ignore note for %s:\n%s", ignored, text)
		}
	}
	if _, err := newLogger("info", f.logFormat); err != nil {
		t.Errorf("--log-format console: %v", err)
	}
	plan, err := f.cluster.plan(f.name)
	if err != nil || plan != nil {
		t.Errorf("kubeadm's one-member --initial-cluster: plan %v, err %v; want a single node", plan, err)
	}
}
