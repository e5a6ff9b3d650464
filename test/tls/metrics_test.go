package tls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dyad-db/dyad/test/testutil"
)

// metricsGet fetches url with a client that trusts ca (empty: plaintext)
// and presents cert (empty: none), returning the status and body.
func metricsGet(t *testing.T, url, dir, ca, cert string) (int, string, error) {
	t.Helper()
	tr := &http.Transport{}
	if ca != "" {
		pem, err := os.ReadFile(filepath.Join(dir, ca))
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(pem)
		tr.TLSClientConfig = &tls.Config{RootCAs: pool}
		if cert != "" {
			kp, err := tls.LoadX509KeyPair(filepath.Join(dir, cert+".crt"), filepath.Join(dir, cert+".key"))
			if err != nil {
				t.Fatal(err)
			}
			tr.TLSClientConfig.Certificates = []tls.Certificate{kp}
		}
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// TestMetricsTLS: an https:// --listen-metrics-urls is served over TLS
// with the server certificate, and with the client certificate check of
// the client port (mTLS when --trusted-ca-file is set), by dyad as by
// etcd 3.6 with the same flags; plaintext gets no metrics there.
func TestMetricsTLS(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	for _, target := range []string{testutil.TargetDyad, "etcd-3.6"} {
		t.Run(target, func(t *testing.T) {
			dir := pki(t, dyad)
			for _, mode := range []struct {
				name  string
				flags []string
				mtls  bool
			}{
				{"server TLS only", nil, false},
				{"trusted-ca-file", []string{"--trusted-ca-file=" + filepath.Join(dir, "ca.crt")}, true},
			} {
				t.Run(mode.name, func(t *testing.T) {
					port := freePort(t)
					murl := fmt.Sprintf("https://127.0.0.1:%d/metrics", port)
					startTLS(t, target, dyad, dir, append([]string{"--listen-metrics-urls", fmt.Sprintf("https://127.0.0.1:%d", port)}, mode.flags...))

					code, body, err := metricsGet(t, murl, dir, "ca.crt", "kube-apiserver")
					if err != nil || code != http.StatusOK || !strings.Contains(body, "etcd_server_has_leader") {
						t.Fatalf("https with a client certificate: %d, %v; want 200 with etcd_server_has_leader", code, err)
					}
					code, _, err = metricsGet(t, murl, dir, "ca.crt", "")
					if ok := err == nil && code == http.StatusOK; ok != !mode.mtls {
						t.Errorf("https without a client certificate: %d, %v; want ok=%v", code, err, !mode.mtls)
					}
					code, body, err = metricsGet(t, strings.Replace(murl, "https://", "http://", 1), dir, "", "")
					if err == nil && strings.Contains(body, "etcd_server_has_leader") {
						t.Errorf("plaintext http on the https metrics port served metrics (%d)", code)
					}
				})
			}
		})
	}
}

// TestMetricsHTTPSNeedsCert: an https:// metrics URL without a server
// certificate is refused at start with a clear error, not served in the
// clear.
func TestMetricsHTTPSNeedsCert(t *testing.T) {
	dyad := testutil.BuildDyad(t)
	port := freePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, dyad, "serve", "--name", "n1", "--data-dir", t.TempDir(),
		"--listen-client-urls", fmt.Sprintf("http://127.0.0.1:%d", freePort(t)),
		"--listen-metrics-urls", fmt.Sprintf("https://127.0.0.1:%d", port)).CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("dyad serve with an https metrics URL and no certificate: err %v (context %v); want a refusal\n%s", err, ctx.Err(), out)
	}
	if want := "--listen-metrics-urls https://127.0.0.1:"; !strings.Contains(string(out), want) || !strings.Contains(string(out), "--cert-file") {
		t.Errorf("refusal = %q; want it to name the URL (%s...) and --cert-file", out, want)
	}
}
