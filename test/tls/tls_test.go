package tls

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pki makes a pair's material with `dyad certs` in a fresh directory.
func pki(t *testing.T, dyad string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command(dyad, "certs", "--dir", dir, "--node", "n1=127.0.0.1,localhost", "--client", "kube-apiserver").CombinedOutput()
	if err != nil {
		t.Fatalf("dyad certs: %v\n%s", err, out)
	}
	return dir
}

// startTLS runs target ("dyad" or an etcd binary) serving https on a free
// port with etcd's TLS flags; it returns the endpoint.
func startTLS(t *testing.T, target, dyad, dir string, extra []string) string {
	t.Helper()
	port := freePort(t)
	url := fmt.Sprintf("https://127.0.0.1:%d", port)
	tlsFlags := append([]string{"--cert-file", filepath.Join(dir, "n1.crt"), "--key-file", filepath.Join(dir, "n1.key")}, extra...)
	data := t.TempDir()
	var cmd *exec.Cmd
	if target == testutil.TargetDyad {
		cmd = exec.Command(dyad, append([]string{"serve", "--name", "n1", "--data-dir", data,
			"--listen-client-urls", url, "--advertise-client-urls", url}, tlsFlags...)...)
	} else {
		bin := testutil.RequireBinary(t, target)
		peer := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		cmd = exec.Command(bin, append([]string{"--name", "n1", "--data-dir", data,
			"--listen-client-urls", url, "--advertise-client-urls", url,
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer, "--initial-cluster", "n1=" + peer}, tlsFlags...)...)
	}
	logf, err := os.Create(filepath.Join(data, "..", filepath.Base(data)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("---- %s log ----\n%s", target, b)
		}
	})
	// Ready when a fully credentialed client can write.
	cli := client(t, url, dir, "ca.crt", "kube-apiserver")
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := cli.Put(ctx, "ready", "1")
		cancel()
		if err == nil {
			return url
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready over TLS: %v", target, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// client builds a clientv3 client the way kube-apiserver does from
// --etcd-cafile/--etcd-certfile/--etcd-keyfile (etcd's transport.TLSInfo).
// An empty ca means no TLS, an empty cert no client certificate.
func client(t *testing.T, url, dir, ca, cert string) *clientv3.Client {
	t.Helper()
	cfg := clientv3.Config{Endpoints: []string{url}, DialTimeout: 2 * time.Second, Logger: zap.NewNop()}
	if ca != "" {
		info := transport.TLSInfo{TrustedCAFile: filepath.Join(dir, ca)}
		if cert != "" {
			info.CertFile, info.KeyFile = filepath.Join(dir, cert+".crt"), filepath.Join(dir, cert+".key")
		}
		tc, err := info.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = tc
	} else {
		cfg.Endpoints = []string{strings.Replace(url, "https://", "http://", 1)}
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// TestClientTLS: the same clients against dyad and etcd 3.6 with the same
// flags; each case states whether a put succeeds.
func TestClientTLS(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	etcdctl := testutil.RequireBinary(t, "etcdctl")
	for _, target := range []string{testutil.TargetDyad, "etcd-3.6"} {
		t.Run(target, func(t *testing.T) {
			dir, rogue := pki(t, dyad), pki(t, dyad)
			// The rogue client presents a certificate from another CA.
			for _, f := range []string{"kube-apiserver.crt", "kube-apiserver.key"} {
				b, err := os.ReadFile(filepath.Join(rogue, f))
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, "rogue-"+f), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			trusted := "--trusted-ca-file=" + filepath.Join(dir, "ca.crt")
			for _, mode := range []struct {
				name  string
				flags []string
				mtls  bool // client certificates required
			}{
				{"server TLS only", nil, false},
				// etcd: --trusted-ca-file alone already requires client certificates.
				{"trusted-ca-file", []string{trusted}, true},
				{"client-cert-auth", []string{trusted, "--client-cert-auth"}, true},
			} {
				t.Run(mode.name, func(t *testing.T) {
					url := startTLS(t, target, dyad, dir, mode.flags)
					cases := []struct {
						name, ca, cert string
						ok             bool
					}{
						{"CA and client certificate", "ca.crt", "kube-apiserver", true},
						{"CA, no client certificate", "ca.crt", "", !mode.mtls},
						{"client certificate from another CA", "ca.crt", "rogue-kube-apiserver", !mode.mtls},
						{"plaintext", "", "", false},
						{"server not trusted (other CA)", "../" + filepath.Base(rogue) + "/ca.crt", "kube-apiserver", false},
					}
					for _, c := range cases {
						t.Run(c.name, func(t *testing.T) {
							t.Parallel()
							cli := client(t, url, dir, c.ca, c.cert)
							ctx, cancel := context.WithTimeout(context.Background(), time.Second)
							defer cancel()
							_, err := cli.Put(ctx, "k", c.name)
							if (err == nil) != c.ok {
								t.Fatalf("put err = %v, want ok=%v", err, c.ok)
							}
						})
					}
					ctl := func(args ...string) error {
						full := append([]string{"--endpoints", url, "--dial-timeout", "1s", "--command-timeout", "2s"}, args...)
						out, err := exec.Command(etcdctl, full...).CombinedOutput()
						if err != nil {
							return fmt.Errorf("%v: %s", err, out)
						}
						return nil
					}
					ca := "--cacert=" + filepath.Join(dir, "ca.crt")
					if err := ctl(ca, "--cert="+filepath.Join(dir, "kube-apiserver.crt"), "--key="+filepath.Join(dir, "kube-apiserver.key"), "put", "ctl", "v"); err != nil {
						t.Errorf("etcdctl with a client certificate: %v", err)
					}
					if err := ctl(ca, "put", "ctl", "v"); (err == nil) != !mode.mtls {
						t.Errorf("etcdctl without a client certificate: err = %v, want ok=%v", err, !mode.mtls)
					}
				})
			}
		})
	}
}
