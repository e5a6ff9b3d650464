package site

import (
	"bufio"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/dyad-db/dyad/test/testutil"
)

// zoneIP is a zone's address in the shipped files: zone a on 10.0.1.10,
// zone b on 10.0.2.10. Tests run them on loopback addresses of the same
// shape instead (loopbackOf), so each zone keeps its own client address and
// the pair still runs on one host.
func zoneIP(zone string) string { return map[string]string{"a": "10.0.1.10", "b": "10.0.2.10"}[zone] }

func zones() []string { return []string{"a", "b"} }

func loopbackOf(ip string) string { return "127." + strings.SplitN(ip, ".", 2)[1] }

// localNode is how one zone's node runs in a test: its rewrites and ports.
type localNode struct {
	zone            string
	client, metrics string // ports
	pkiDir, dataDir string
	rewrite         *strings.Replacer
}

// newLocalNodes makes both zones' nodes with `dyad certs` material.
func newLocalNodes(t *testing.T, bin string) (map[string]*localNode, string) {
	t.Helper()
	pki := dyadCerts(t, bin, "--node", "a="+loopbackOf(zoneIP("a")), "--node", "b="+loopbackOf(zoneIP("b")), "--client", "apiserver-etcd-client")
	ports := freePorts(t, 4)
	nodes := map[string]*localNode{}
	for i, zone := range []string{"a", "b"} {
		n := &localNode{zone: zone, client: ports[2*i], metrics: ports[2*i+1], pkiDir: filepath.Join(pki, zone), dataDir: filepath.Join(t.TempDir(), "data-"+zone)}
		n.rewrite = strings.NewReplacer(
			zoneIP("a"), loopbackOf(zoneIP("a")), zoneIP("b"), loopbackOf(zoneIP("b")),
			":2379", ":"+n.client, ":2381", ":"+n.metrics,
			"eth0", "lo",
		)
		nodes[zone] = n
	}
	return nodes, pki
}

// onlyLoopback fails the test before anything starts if a rewritten
// command line or environment still names a non-loopback address.
func onlyLoopback(t *testing.T, what string, values []string) {
	t.Helper()
	ipv4 := regexp.MustCompile(`\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b`)
	for _, v := range values {
		for _, ip := range ipv4.FindAllString(v, -1) {
			if p := net.ParseIP(ip); p == nil || !p.IsLoopback() {
				t.Fatalf("%s: %q still names %s after rewriting to loopback", what, v, ip)
			}
		}
	}
}

// servePair waits until both nodes are ready, then writes on a and reads
// on b over client TLS.
func servePair(t *testing.T, pki string, nodes map[string]*localNode, procs map[string]*process) {
	t.Helper()
	client, tlsCfg := tlsClient(t, filepath.Join(pki, "ca.crt"), filepath.Join(pki, "apiserver-etcd-client.crt"), filepath.Join(pki, "apiserver-etcd-client.key"))
	plain := &http.Client{Timeout: 10 * time.Second}
	for _, zone := range []string{"a", "b"} {
		n, p := nodes[zone], procs[zone]
		p.get(t, plain, "http://127.0.0.1:"+n.metrics+"/readyz")
		checkVersion(t, p.get(t, client, "https://"+loopbackOf(zoneIP(zone))+":"+n.client+"/version"))
		checkHealth(t, p.get(t, client, "https://127.0.0.1:"+n.client+"/health"))
	}
	putGet(t, tlsCfg, "127.0.0.1:"+nodes["a"].client, "127.0.0.1:"+nodes["b"].client)
	for zone, p := range procs {
		if log := p.logText(t); !strings.Contains(log, `"dds-security":true`) {
			t.Errorf("zone %s did not start with DDS Security", zone)
		}
	}
}

func flagValues(args []string) map[string]string {
	out := map[string]string{}
	for _, a := range args {
		if name, val, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			out[name] = val
		} else if strings.HasPrefix(a, "--") {
			out[strings.TrimPrefix(a, "--")] = "true"
		}
	}
	return out
}

// securityFlags are what turns client TLS with client certificates and
// DDS Security on; the shipped files must set every one.
func securityFlags() []string {
	return []string{"cert-file", "key-file", "trusted-ca-file", "client-cert-auth",
		"peer-cert-file", "peer-key-file", "peer-trusted-ca-file", "dds-governance-file", "dds-permissions-file"}
}

func staticPods(t *testing.T) map[string]*corev1.Pod {
	t.Helper()
	pods := map[string]*corev1.Pod{}
	for _, zone := range zones() {
		path := "deploy/kubernetes/dyad-zone-" + zone + ".yaml"
		var pod corev1.Pod
		if err := yaml.UnmarshalStrict(testutil.ReadRepoFile(t, path), &pod); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		pods[zone] = &pod
	}
	return pods
}

// TestStaticPodManifests lints both zones' manifests against each other and
// against what a site needs: no DNS in the store's path, security on,
// every file on a host volume, probes on the metrics listener, and the
// kubeadm example pointing at both nodes.
func TestStaticPodManifests(t *testing.T) {
	pods := staticPods(t)
	var clusters []string
	var advertised []string
	for zone, pod := range pods {
		spec := pod.Spec
		if !spec.HostNetwork || spec.DNSPolicy != corev1.DNSDefault {
			t.Errorf("zone %s: hostNetwork %v dnsPolicy %q; want host networking and dnsPolicy Default (cluster DNS runs on the store)", zone, spec.HostNetwork, spec.DNSPolicy)
		}
		c := spec.Containers[0]
		if len(c.Command) < 2 || c.Command[1] != "serve" {
			t.Fatalf("zone %s: command %v", zone, c.Command)
		}
		f := flagValues(c.Command[2:])
		if f["name"] != zone {
			t.Errorf("zone %s: --name=%s", zone, f["name"])
		}
		for _, s := range securityFlags() {
			if f[s] == "" {
				t.Errorf("zone %s: --%s is not set", zone, s)
			}
		}
		clusters = append(clusters, f["initial-cluster"]+" "+f["initial-cluster-token"]+" "+f["preferred-zone"])
		for _, m := range strings.Split(f["initial-cluster"], ",") {
			name, raw, _ := strings.Cut(m, "=")
			u, err := url.Parse(raw)
			if err != nil || net.ParseIP(u.Hostname()) == nil {
				t.Errorf("zone %s: --initial-cluster member %q is not an IP address (a host name needs DNS)", zone, m)
				continue
			}
			if name == zone && u.Hostname() != zoneIP(zone) {
				t.Errorf("zone %s: its own --initial-cluster address %s, want %s", zone, u.Hostname(), zoneIP(zone))
			}
		}
		adv, err := url.Parse(f["advertise-client-urls"])
		if err != nil || adv.Hostname() != zoneIP(zone) {
			t.Errorf("zone %s: --advertise-client-urls=%s is not this zone's address", zone, f["advertise-client-urls"])
		} else {
			advertised = append(advertised, adv.String())
		}
		if !strings.Contains(f["listen-client-urls"], "https://127.0.0.1:") {
			t.Errorf("zone %s: --listen-client-urls=%s lacks loopback (the local apiserver's address)", zone, f["listen-client-urls"])
		}
		hostPaths := map[string]bool{}
		for _, v := range spec.Volumes {
			if v.HostPath != nil {
				hostPaths[v.Name] = true
			}
		}
		var mounts []string
		for _, m := range c.VolumeMounts {
			if hostPaths[m.Name] {
				mounts = append(mounts, m.MountPath)
			}
		}
		for name, val := range f {
			if strings.HasSuffix(name, "-file") || name == "data-dir" {
				if !slices.ContainsFunc(mounts, func(m string) bool { return val == m || strings.HasPrefix(val, m+"/") }) {
					t.Errorf("zone %s: --%s=%s is on no host volume", zone, name, val)
				}
			}
		}
		metrics, err := url.Parse(f["listen-metrics-urls"])
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if p == nil {
				continue
			}
			if g := p.HTTPGet; g == nil || g.Host != metrics.Hostname() || g.Port.String() != metrics.Port() {
				t.Errorf("zone %s: a probe does not target --listen-metrics-urls %s", zone, metrics)
			}
		}
	}
	if clusters[0] != clusters[1] {
		t.Errorf("the zones disagree on the pair: %q vs %q", clusters[0], clusters[1])
	}

	var kc struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Etcd       struct {
			External struct {
				Endpoints                 []string
				CAFile, CertFile, KeyFile string
			} `json:"external"`
		} `json:"etcd"`
	}
	if err := yaml.Unmarshal(testutil.ReadRepoFile(t, "deploy/kubeadm/cluster-configuration.yaml"), &kc); err != nil {
		t.Fatal(err)
	}
	ext := kc.Etcd.External
	slices.Sort(advertised)
	slices.Sort(ext.Endpoints)
	if kc.Kind != "ClusterConfiguration" || !strings.HasPrefix(kc.APIVersion, "kubeadm.k8s.io/") || !slices.Equal(ext.Endpoints, advertised) ||
		ext.CAFile == "" || ext.CertFile == "" || ext.KeyFile == "" {
		t.Errorf("kubeadm example: %s %s external etcd %+v; want both advertised client URLs %v and all three files", kc.APIVersion, kc.Kind, ext, advertised)
	}
}

// TestStaticPodsServeAsPair runs both zones' manifest command lines, with
// their host paths on `dyad certs` output and their addresses on loopback,
// and checks that they form a secure pair that serves.
func TestStaticPodsServeAsPair(t *testing.T) {
	startStaticPodPair(t)
}

// startStaticPodPair runs both zones' static pod command lines, as
// TestStaticPodsServeAsPair describes, waits until they serve as a secure
// pair, and returns the dyad binary, the nodes, the `dyad certs`
// directory and the processes.
func startStaticPodPair(t *testing.T) (string, map[string]*localNode, string, map[string]*process) {
	t.Helper()
	return startStaticPodPairWith(t, nil)
}

// startStaticPodPairWith is startStaticPodPair with extra arguments
// appended to a zone's command line (extra[zone]).
func startStaticPodPairWith(t *testing.T, extra map[string][]string) (string, map[string]*localNode, string, map[string]*process) {
	t.Helper()
	bin := testutil.BuildDyad(t)
	nodes, pki := newLocalNodes(t, bin)
	procs := map[string]*process{}
	for zone, pod := range staticPods(t) {
		n := nodes[zone]
		c := pod.Spec.Containers[0]
		paths := map[string]string{} // mount path -> the test's directory
		for _, m := range c.VolumeMounts {
			switch m.Name {
			case "pki":
				paths[m.MountPath] = n.pkiDir
			case "data":
				paths[m.MountPath] = n.dataDir
			default:
				t.Fatalf("zone %s: unknown volume %s", zone, m.Name)
			}
		}
		argv := []string{bin}
		for _, a := range c.Command[1:] {
			for from, to := range paths {
				a = strings.ReplaceAll(a, "="+from, "="+to)
			}
			argv = append(argv, n.rewrite.Replace(a))
		}
		argv = append(argv, extra[zone]...)
		onlyLoopback(t, "zone "+zone, argv)
		procs[zone] = start(t, "zone-"+zone, argv, os.Environ())
	}
	servePair(t, pki, nodes, procs)
	return bin, nodes, pki, procs
}

// unitFile is what the test reads from a systemd unit.
type unitFile struct {
	execStart   []string
	credentials map[string]string // LoadCredential: name -> source path
	envFile     string
	settings    map[string][]string // every KEY=value of [Service]
}

// parseUnit reads the [Service] section: continuation lines joined, comments
// skipped, as systemd reads it.
func parseUnit(t *testing.T, text string) unitFile {
	t.Helper()
	u := unitFile{credentials: map[string]string{}, settings: map[string][]string{}}
	section := ""
	var logical []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if cur.Len() == 0 && (line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";")) {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur.WriteString(strings.TrimSuffix(line, "\\") + " ")
			continue
		}
		cur.WriteString(line)
		logical = append(logical, cur.String())
		cur.Reset()
	}
	for _, l := range logical {
		if strings.HasPrefix(l, "[") {
			section = l
			continue
		}
		if section != "[Service]" {
			continue
		}
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("unit line %q", l)
		}
		u.settings[k] = append(u.settings[k], v)
		switch k {
		case "ExecStart":
			u.execStart = strings.Fields(v)
		case "LoadCredential":
			name, src, _ := strings.Cut(v, ":")
			u.credentials[name] = src
		case "EnvironmentFile":
			u.envFile = v
		}
	}
	return u
}

// parseEnvFile reads KEY=VALUE lines, as systemd's EnvironmentFile does for
// the simple unquoted form the shipped file uses.
func parseEnvFile(text string) [][2]string {
	var out [][2]string
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		out = append(out, [2]string{k, v})
	}
	return out
}

// TestSystemdUnitServesAsPair starts the shipped unit's ExecStart line on
// both zones as systemd would: the environment from dyad.env (zone b's edited
// as its comments say), the credentials copied from `dyad certs`' node
// directory into a credentials directory for %d, the state directory for
// /var/lib/dyad. The unit must also run as a user it does not need created.
func TestSystemdUnitServesAsPair(t *testing.T) {
	bin := testutil.BuildDyad(t)
	u := parseUnit(t, string(testutil.ReadRepoFile(t, "deploy/systemd/dyad.service")))
	if got := u.settings["DynamicUser"]; !slices.Equal(got, []string{"yes"}) {
		if user := u.settings["User"]; len(user) > 0 {
			t.Errorf("the unit runs as User=%v, which nothing creates; want DynamicUser=yes", user)
		}
	}
	if !slices.Equal(u.settings["StateDirectory"], []string{"dyad"}) {
		t.Errorf("StateDirectory=%v, want dyad (/var/lib/dyad, owned by the service's user)", u.settings["StateDirectory"])
	}
	if len(u.execStart) < 2 || u.execStart[0] != "/usr/local/bin/dyad" || u.execStart[1] != "serve" {
		t.Fatalf("ExecStart %v", u.execStart)
	}
	f := flagValues(u.execStart[2:])
	for _, s := range securityFlags() {
		if _, ok := f[s]; !ok && !strings.Contains(strings.Join(u.execStart, " "), "--"+s+" ") {
			t.Errorf("ExecStart does not set --%s", s)
		}
	}
	if u.envFile != "/etc/dyad/dyad.env" {
		t.Fatalf("EnvironmentFile=%q", u.envFile)
	}
	baseEnv := parseEnvFile(string(testutil.ReadRepoFile(t, "deploy/systemd/dyad.env")))

	nodes, pki := newLocalNodes(t, bin)
	procs := map[string]*process{}
	for _, zone := range []string{"a", "b"} {
		n := nodes[zone]
		// systemd copies each credential into a directory only the service reads.
		creds := filepath.Join(t.TempDir(), "credentials")
		if err := os.Mkdir(creds, 0o700); err != nil {
			t.Fatal(err)
		}
		for name, src := range u.credentials {
			if !strings.HasPrefix(src, "/etc/dyad/pki/") {
				t.Fatalf("LoadCredential %s from %s, outside /etc/dyad/pki", name, src)
			}
			b, err := os.ReadFile(filepath.Join(n.pkiDir, strings.TrimPrefix(src, "/etc/dyad/pki/")))
			if err != nil {
				t.Fatalf("LoadCredential %s: `dyad certs` wrote no such file: %v", name, err)
			}
			if err := os.WriteFile(filepath.Join(creds, name), b, 0o400); err != nil {
				t.Fatal(err)
			}
		}
		var env []string
		vars := map[string]string{}
		for _, kv := range baseEnv {
			k, v := kv[0], kv[1]
			if zone == "b" { // what the file's comment says to change on zone b's host
				switch k {
				case "DYAD_NAME":
					v = "b"
				case "DYAD_LISTEN_CLIENT_URLS", "DYAD_ADVERTISE_CLIENT_URLS":
					v = strings.ReplaceAll(v, zoneIP("a"), zoneIP("b"))
				}
			}
			v = n.rewrite.Replace(v)
			vars[k] = v
			env = append(env, k+"="+v)
		}
		var argv []string
		for _, w := range u.execStart {
			w = strings.ReplaceAll(w, "%d", creds)
			if strings.Contains(w, "%") {
				t.Fatalf("ExecStart word %q uses a specifier this test does not expand", w)
			}
			w = os.Expand(w, func(k string) string { return vars[k] })
			w = strings.Replace(w, "/usr/local/bin/dyad", bin, 1)
			w = strings.Replace(w, "/var/lib/dyad", n.dataDir, 1)
			argv = append(argv, w)
		}
		onlyLoopback(t, "zone "+zone, append(slices.Clone(argv), env...))
		procs[zone] = start(t, "unit-"+zone, argv, env)
	}
	servePair(t, pki, nodes, procs)
}
