package site

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/dyad-db/dyad/test/testutil"
)

// TestKubeadmEtcdManifest starts dyad with the exact command line kubeadm
// v1.36 gives etcd (only "etcd" replaced by "dyad serve"), with the node's
// files from `dyad certs` in kubeadm's layout, and checks what a kubeadm
// cluster uses: /version as kubeadm's preflight reads it, /health on the
// client port, the pod's own probes, and a put and a get over TLS.
func TestKubeadmEtcdManifest(t *testing.T) {
	bin := testutil.BuildDyad(t)
	const addr = "127.0.0.2" // the node's "advertise address", a second loopback address
	pki := dyadCerts(t, bin, "--node", "node1="+addr, "--client", "apiserver-etcd-client")
	ports := freePorts(t, 3)
	raw, err := os.ReadFile(filepath.Join("testdata", "kubeadm-v1.36-etcd.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	manifest := strings.NewReplacer("@ADDR@", addr, "@CLIENT@", ports[0], "@PEER@", ports[1], "@METRICS@", ports[2],
		"@PKI@", filepath.Join(pki, "node1"), "@DATA@", filepath.Join(t.TempDir(), "etcd")).Replace(string(raw))
	var pod corev1.Pod
	if err := yaml.UnmarshalStrict([]byte(manifest), &pod); err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Command[0] != "etcd" {
		t.Fatalf("manifest command %v does not start with etcd", c.Command)
	}
	p := start(t, "dyad", append([]string{bin, "serve"}, c.Command[1:]...), os.Environ())

	client, tlsCfg := tlsClient(t, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "apiserver-etcd-client.crt"), filepath.Join(pki, "apiserver-etcd-client.key"))
	for _, host := range []string{"127.0.0.1", addr} { // both --listen-client-urls
		base := "https://" + host + ":" + ports[0]
		checkVersion(t, p.get(t, client, base+"/version"))
		checkHealth(t, p.get(t, client, base+"/health"))
		p.get(t, client, base+"/readyz")
	}
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
		g := probe.HTTPGet
		p.get(t, &http.Client{Timeout: 10 * time.Second}, strings.ToLower(string(g.Scheme))+"://"+g.Host+":"+g.Port.String()+g.Path)
	}
	putGet(t, tlsCfg, "127.0.0.1:"+ports[0], addr+":"+ports[0])

	log := p.logText(t)
	for _, flag := range []string{"--listen-peer-urls", "--initial-advertise-peer-urls", "--snapshot-count", "--peer-client-cert-auth", "InitialCorruptCheck=true"} {
		if !strings.Contains(log, flag) {
			t.Errorf("the log does not say that %s is ignored", flag)
		}
	}
}

// TestClientHTTPURLs: etcd's --listen-client-http-urls serves the HTTP
// endpoints on their own https port with the client TLS rules, while the
// client port keeps serving gRPC.
func TestClientHTTPURLs(t *testing.T) {
	bin := testutil.BuildDyad(t)
	pki := dyadCerts(t, bin, "--node", "n=127.0.0.1", "--client", "c")
	ports := freePorts(t, 2)
	nd := filepath.Join(pki, "n")
	p := start(t, "dyad", []string{bin, "serve", "--name", "n", "--data-dir", filepath.Join(t.TempDir(), "d"),
		"--listen-client-urls", "https://127.0.0.1:" + ports[0], "--listen-client-http-urls", "https://127.0.0.1:" + ports[1],
		"--cert-file", filepath.Join(nd, "server.crt"), "--key-file", filepath.Join(nd, "server.key"), "--trusted-ca-file", filepath.Join(nd, "ca.crt")}, os.Environ())
	client, tlsCfg := tlsClient(t, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "c.crt"), filepath.Join(pki, "c.key"))
	checkVersion(t, p.get(t, client, "https://127.0.0.1:"+ports[1]+"/version"))
	checkHealth(t, p.get(t, client, "https://127.0.0.1:"+ports[1]+"/health"))
	// Without a client certificate the HTTP port refuses, as the client port does.
	anon, _ := tlsClient(t, filepath.Join(pki, "ca.crt"), "", "")
	if resp, err := anon.Get("https://127.0.0.1:" + ports[1] + "/version"); err == nil {
		resp.Body.Close()
		t.Fatalf("GET /version without a client certificate: %s, want a TLS refusal", resp.Status)
	}
	putGet(t, tlsCfg, "127.0.0.1:"+ports[0], "127.0.0.1:"+ports[0])
}
