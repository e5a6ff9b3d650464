package e2e

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// Ports inside every zone (each zone is its own network namespace, so the
// two zones use the same numbers). The second etcd member of zone a (the
// three-member contrast) adds secondPortOffset.
const (
	storeClientPort  = 2379
	storePeerPort    = 2380
	apiserverPort    = 6443
	secondPortOffset = 10000
)

// Timings of the control plane, shortened so that a zone loss plays out in
// tens of seconds instead of minutes. Kubernetes' defaults are in brackets.
const (
	// kwok renews each node's Lease every quarter of this [kubelet: 40 s].
	nodeLeaseSeconds = 8
	// The node lifecycle controller checks nodes this often [5 s] and
	// declares a node whose Lease has not been renewed for the grace period
	// NotReady/Unknown and taints it [50 s]. The grace period must exceed
	// kwok's renew interval (2 s) by a safe margin.
	nodeMonitorPeriod = "1s"
	nodeMonitorGrace  = "8s"
	// Tainting nodes of a fully disrupted zone is rate-limited to this many
	// nodes per second [0.1, i.e. one node every 10 s]; the secondary rate
	// applies to partially disrupted zones [0.01, and 0 below 50 nodes, which
	// would stop evictions there altogether].
	nodeEvictionRate = "100"
	// The DefaultTolerationSeconds admission plugin gives every pod these
	// tolerations for the not-ready and unreachable NoExecute taints [300 s]:
	// a pod on a lost node is evicted this long after its node is tainted.
	tolerationSeconds = "3"
	// Leader election of kube-controller-manager and kube-scheduler across
	// the zones [15 s lease, 10 s renew deadline, 2 s retry].
	leaseDuration = "4s"
	renewDeadline = "3s"
	retryPeriod   = "1s"
	// Client rate limits of the controllers and the scheduler [20/30 and
	// 50/100 requests/s]: high enough that 1,000 pods measure the store,
	// not the client-side limiter. kwok has no limit.
	kubeAPIQPS   = "500"
	kubeAPIBurst = "1000"
)

// backend selects the store under the control plane.
type backend string

const (
	backendDyad  backend = "dyad"  // a dyad pair, one node per zone
	backendEtcd2 backend = "etcd2" // etcd 3.6, one member per zone
	backendEtcd3 backend = "etcd3" // etcd 3.6, two members in zone a, one in b
)

var zoneNames = [2]testutil.Zone{testutil.ZoneA, testutil.ZoneB}

// siteOptions shape one site.
type siteOptions struct {
	backend backend
	// nodesPerZone is how many kwok nodes each zone simulates.
	nodesPerZone int
	// bothEndpoints gives each apiserver both zones' store endpoints (its
	// own first) instead of its own zone's only.
	bothEndpoints bool
	// mtls serves the store over TLS and has the apiservers (and the test)
	// present client certificates (--client-cert-auth), with the flags a
	// production site uses.
	mtls bool
}

// member is one store process: a dyad node or an etcd member.
type member struct {
	name string
	zone testutil.Zone
	port int // client port; the peer port is port+1
	args []string
	proc *testutil.Proc
}

// zoneProcs are the Kubernetes processes of one zone.
type zoneProcs struct {
	apiserver            *testutil.Proc
	kcm, scheduler, kwok *supervisor
}

// site is one two-zone Kubernetes site: a store spread over the zones and a
// control plane in each zone. Every process belongs to net and is killed
// on cleanup.
type site struct {
	t     *testing.T
	opts  siteOptions
	net   *testutil.Zones
	k8s   k8sBins
	dir   string
	token string
	pki   *pki // nil without opts.mtls

	nudges    atomic.Int64 // stuck pods deleted by nudgeIfStuck
	apiErrors atomic.Int64 // API errors waitFor retried past

	mu          sync.Mutex
	supervisors []*supervisor // every one ever started; guarded by mu

	members []*member
	zones   [2]zoneProcs
	clients [2]*kubernetes.Clientset
}

// k8sBins are the paths of the Kubernetes binaries.
type k8sBins struct {
	apiserver, kcm, scheduler, kwok, stages string
}

// k8sBinsOnce builds the Kubernetes components at most once per test binary.
type k8sBinsOnce struct {
	once sync.Once
	bins k8sBins
	err  error
}

// buildK8s returns the Kubernetes binaries, running scripts/k8s.sh (which
// is idempotent and skips what is built) unless DYAD_K8S_BIN names a
// directory holding them.
func (o *k8sBinsOnce) get(t *testing.T) k8sBins {
	t.Helper()
	o.once.Do(func() {
		dir := os.Getenv("DYAD_K8S_BIN")
		if dir == "" {
			root, err := testutil.RepoRoot()
			if err != nil {
				o.err = err
				return
			}
			start := time.Now()
			cmd := exec.Command(filepath.Join(root, "scripts", "k8s.sh"), "--print-bin-dir")
			cmd.Dir = root
			out, err := cmd.CombinedOutput()
			if err != nil {
				o.err = fmt.Errorf("scripts/k8s.sh: %v\n%s", err, out)
				return
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			dir = lines[len(lines)-1]
			t.Logf("scripts/k8s.sh took %v", time.Since(start).Round(time.Second))
		}
		o.bins = k8sBins{
			apiserver: filepath.Join(dir, "kube-apiserver"),
			kcm:       filepath.Join(dir, "kube-controller-manager"),
			scheduler: filepath.Join(dir, "kube-scheduler"),
			kwok:      filepath.Join(dir, "kwok"),
			stages:    filepath.Join(dir, "kwok-stages.yaml"),
		}
		for _, p := range []string{o.bins.apiserver, o.bins.kcm, o.bins.scheduler, o.bins.kwok, o.bins.stages} {
			if _, err := os.Stat(p); err != nil {
				o.err = fmt.Errorf("kubernetes binaries: %w (DYAD_K8S_BIN=%q)", err, dir)
				return
			}
		}
	})
	if o.err != nil {
		t.Fatal(o.err)
	}
	return o.bins
}

// newSite starts the store, then each zone's control plane, creates the
// kwok nodes and waits until they are Ready.
func newSite(t *testing.T, bins *k8sBinsOnce, opts siteOptions) *site {
	t.Helper()
	net := testutil.NewZones(t) // skips without root
	s := &site{t: t, opts: opts, net: net, dir: t.TempDir()}
	// Registered after NewZones, so it runs first: no supervisor restarts
	// a process while the zones are torn down.
	t.Cleanup(func() {
		s.mu.Lock()
		svs := append([]*supervisor(nil), s.supervisors...)
		s.mu.Unlock()
		for _, sv := range svs {
			sv.kill()
		}
	})
	s.k8s = bins.get(t)
	s.token = randomHex(16)
	s.writeCommonFiles()
	if opts.mtls {
		if err := os.Mkdir(s.path("pki"), 0o700); err != nil {
			t.Fatal(err)
		}
		s.pki = newPKI(t, s.path("pki"), []string{net.ClientIP(testutil.ZoneA), net.ClientIP(testutil.ZoneB),
			net.ReplIP(testutil.ZoneA), net.ReplIP(testutil.ZoneB)})
	}
	s.planMembers()
	for _, m := range s.members {
		s.startMember(m)
	}
	s.waitStore(60 * time.Second)
	for _, z := range zoneNames {
		s.startControlPlane(z)
	}
	for _, z := range zoneNames {
		s.waitAPIReady(z, 90*time.Second)
	}
	s.createNodes()
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

func (s *site) path(name string) string { return filepath.Join(s.dir, name) }

// writeCommonFiles writes what every apiserver shares: the token file and
// the service-account key pair.
func (s *site) writeCommonFiles() {
	t := s.t
	if err := os.WriteFile(s.path("tokens.csv"), []byte(s.token+",e2e-admin,e2e-admin,system:masters\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, s.path("sa.key"), "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key))
	writePEM(t, s.path("sa.pub"), "PUBLIC KEY", pub)
	for _, z := range zoneNames {
		kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster:
    server: https://%s
    insecure-skip-tls-verify: true
users:
- name: e2e-admin
  user:
    token: %s
contexts:
- name: e2e
  context:
    cluster: e2e
    user: e2e-admin
current-context: e2e
`, s.net.ClientAddr(z, apiserverPort), s.token)
		if err := os.WriteFile(s.path("kubeconfig-"+z.String()), []byte(kc), 0o600); err != nil {
			t.Fatal(err)
		}
		sched := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %s
  qps: %s
  burst: %s
leaderElection:
  leaderElect: true
  leaseDuration: %s
  renewDeadline: %s
  retryPeriod: %s
  resourceLock: leases
  resourceName: kube-scheduler
  resourceNamespace: kube-system
`, s.path("kubeconfig-"+z.String()), kubeAPIQPS, kubeAPIBurst, leaseDuration, renewDeadline, retryPeriod)
		if err := os.WriteFile(s.path("scheduler-"+z.String()+".yaml"), []byte(sched), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}

// scheme is the store's URL scheme.
func (s *site) scheme() string {
	if s.pki != nil {
		return "https"
	}
	return "http"
}

// storeTLSFlags are the serving flags of a store member (dyad and etcd
// spell them the same).
func (s *site) storeTLSFlags() []string {
	if s.pki == nil {
		return nil
	}
	return []string{"--cert-file", s.pki.serverCert, "--key-file", s.pki.serverKey,
		"--trusted-ca-file", s.pki.ca, "--client-cert-auth"}
}

// listenURLs are member m's client URLs: its zone's client address (its
// own zone's apiserver, the test), and its replication-link address, the
// only one the other zone can reach (the client links end in the test's
// namespace), used by apiservers that list both zones' members.
func (s *site) listenURLs(m *member) string {
	return fmt.Sprintf("%[1]s://%[2]s:%[4]d,%[1]s://%[3]s:%[4]d", s.scheme(), s.net.ClientIP(m.zone), s.net.ReplIP(m.zone), m.port)
}

// planMembers decides the store members and their command lines.
func (s *site) planMembers() {
	ip := func(z testutil.Zone) string { return s.net.ClientIP(z) }
	repl := func(z testutil.Zone) string { return s.net.ReplIP(z) }
	switch s.opts.backend {
	case backendDyad:
		bin := testutil.BuildDyad(s.t)
		cluster := fmt.Sprintf("a=http://%s:%d,b=http://%s:%d", repl(testutil.ZoneA), storePeerPort, repl(testutil.ZoneB), storePeerPort)
		for _, z := range zoneNames {
			m := &member{name: z.String(), zone: z, port: storeClientPort}
			m.args = []string{bin, "serve", "--name", m.name,
				"--data-dir", s.path("store-" + m.name),
				"--initial-cluster", cluster,
				"--dds-interface", testutil.ReplIface,
				"--listen-client-urls", s.listenURLs(m),
				"--advertise-client-urls", fmt.Sprintf("%s://%s:%d", s.scheme(), ip(z), m.port),
				"--log-format", "text"}
			m.args = append(m.args, s.storeTLSFlags()...)
			s.members = append(s.members, m)
		}
	case backendEtcd2, backendEtcd3:
		bin := testutil.RequireBinary(s.t, "etcd-3.6")
		ms := []*member{
			{name: "a", zone: testutil.ZoneA, port: storeClientPort},
			{name: "b", zone: testutil.ZoneB, port: storeClientPort},
		}
		if s.opts.backend == backendEtcd3 {
			ms = append(ms, &member{name: "a2", zone: testutil.ZoneA, port: storeClientPort + secondPortOffset})
		}
		var cluster []string
		for _, m := range ms {
			cluster = append(cluster, fmt.Sprintf("%s=http://%s:%d", m.name, repl(m.zone), m.port+1))
		}
		for _, m := range ms {
			client := fmt.Sprintf("%s://%s:%d", s.scheme(), ip(m.zone), m.port)
			peer := fmt.Sprintf("http://%s:%d", repl(m.zone), m.port+1)
			m.args = []string{bin, "--name", m.name,
				"--data-dir", s.path("store-" + m.name),
				"--listen-client-urls", s.listenURLs(m), "--advertise-client-urls", client,
				"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
				"--initial-cluster", strings.Join(cluster, ","),
				"--initial-cluster-state", "new", "--initial-cluster-token", "e2e",
				"--log-level", "warn"}
			m.args = append(m.args, s.storeTLSFlags()...)
			s.members = append(s.members, m)
		}
	default:
		s.t.Fatalf("unknown backend %q", s.opts.backend)
	}
}

func (s *site) startMember(m *member) {
	m.proc = s.net.StartInZone(m.zone, m.args[0], m.args[1:]...)
}

func (s *site) endpoint(m *member) string { return s.net.ClientAddr(m.zone, m.port) }

// storeClient is an etcd client of member m alone.
func (s *site) storeClient(m *member, dial time.Duration) (*clientv3.Client, error) {
	cfg := clientv3.Config{Endpoints: []string{s.endpoint(m)}, DialTimeout: dial, Logger: zap.NewNop()}
	if s.pki != nil {
		cfg.TLS = s.pki.client
	}
	return clientv3.New(cfg)
}

// zoneMembers are the store members of zone z.
func (s *site) zoneMembers(z testutil.Zone) []*member {
	var out []*member
	for _, m := range s.members {
		if m.zone == z {
			out = append(out, m)
		}
	}
	return out
}

// storeStatus asks member m for its status; ok is false when it does not
// answer within a second.
func (s *site) storeStatus(m *member) (st *clientv3.StatusResponse, ok bool) {
	cli, err := s.storeClient(m, time.Second)
	if err != nil {
		return nil, false
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	st, err = cli.Status(ctx, s.endpoint(m))
	return st, err == nil
}

// leaderZone is the zone of the member every running member names as
// leader (dyad: the primary), or -1 while they disagree or know none.
func (s *site) leaderZone(members []*member) testutil.Zone {
	var leader uint64
	ids := map[uint64]testutil.Zone{}
	for _, m := range members {
		st, ok := s.storeStatus(m)
		if !ok || st.Leader == 0 || (leader != 0 && st.Leader != leader) {
			return -1
		}
		leader = st.Leader
		ids[st.Header.MemberId] = m.zone
	}
	if z, ok := ids[leader]; ok {
		return z
	}
	return -1
}

// running are the members whose process is alive.
func (s *site) running() []*member {
	var out []*member
	for _, m := range s.members {
		if m.proc != nil && !m.proc.Exited() {
			out = append(out, m)
		}
	}
	return out
}

// waitStore waits until every running member agrees on a leader and
// returns its zone.
func (s *site) waitStore(within time.Duration) testutil.Zone {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if z := s.leaderZone(s.running()); z >= 0 {
			return z
		}
		time.Sleep(200 * time.Millisecond)
	}
	s.t.Fatalf("the store members do not agree on a leader within %v", within)
	return -1
}

// etcdServers is the --etcd-servers value of zone z's apiserver.
func (s *site) etcdServers(z testutil.Zone) string {
	var own, other []string
	for _, m := range s.members {
		if m.zone == z {
			own = append(own, s.scheme()+"://"+s.endpoint(m))
		} else {
			// Across zones only the replication link routes.
			other = append(other, fmt.Sprintf("%s://%s:%d", s.scheme(), s.net.ReplIP(m.zone), m.port))
		}
	}
	if s.opts.bothEndpoints {
		own = append(own, other...)
	}
	return strings.Join(own, ",")
}

// startControlPlane starts zone z's apiserver, controller-manager,
// scheduler and kwok. The controllers and kwok talk to their own zone's
// apiserver only, as a kubelet or a controller on a control-plane node
// would through its local endpoint.
func (s *site) startControlPlane(z testutil.Zone) {
	ip := s.net.ClientIP(z)
	kubeconfig := s.path("kubeconfig-" + z.String())
	p := &s.zones[z]
	var etcdTLS []string
	if s.pki != nil {
		etcdTLS = []string{"--etcd-cafile=" + s.pki.ca, "--etcd-certfile=" + s.pki.clientCert, "--etcd-keyfile=" + s.pki.clientKey}
	}
	p.apiserver = s.net.StartInZone(z, s.k8s.apiserver, append(etcdTLS,
		"--etcd-servers="+s.etcdServers(z),
		"--bind-address="+ip, "--advertise-address="+ip,
		fmt.Sprintf("--secure-port=%d", apiserverPort),
		"--cert-dir="+s.path("apiserver-certs-"+z.String()),
		"--token-auth-file="+s.path("tokens.csv"),
		"--authorization-mode=AlwaysAllow",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+s.path("sa.pub"),
		"--service-account-signing-key-file="+s.path("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		"--default-not-ready-toleration-seconds="+tolerationSeconds,
		"--default-unreachable-toleration-seconds="+tolerationSeconds,
		"--profiling=false",
	)...)
	p.kcm = s.supervise(z, s.k8s.kcm,
		"--kubeconfig="+kubeconfig,
		"--secure-port=0",
		"--leader-elect=true",
		"--leader-elect-lease-duration="+leaseDuration,
		"--leader-elect-renew-deadline="+renewDeadline,
		"--leader-elect-retry-period="+retryPeriod,
		"--node-monitor-period="+nodeMonitorPeriod,
		"--node-monitor-grace-period="+nodeMonitorGrace,
		"--node-eviction-rate="+nodeEvictionRate,
		"--secondary-node-eviction-rate="+nodeEvictionRate,
		"--kube-api-qps="+kubeAPIQPS,
		"--kube-api-burst="+kubeAPIBurst,
		"--use-service-account-credentials=false",
		"--profiling=false",
	)
	p.scheduler = s.supervise(z, s.k8s.scheduler,
		"--config="+s.path("scheduler-"+z.String()+".yaml"),
		"--secure-port=0",
		"--profiling=false",
	)
	p.kwok = s.supervise(z, s.k8s.kwok,
		"--kubeconfig="+kubeconfig,
		"--config="+s.k8s.stages,
		"--manage-all-nodes=false",
		"--manage-nodes-with-label-selector=topology.kubernetes.io/zone="+z.String(),
		fmt.Sprintf("--node-lease-duration-seconds=%d", nodeLeaseSeconds),
		"--server-address="+ip+":10247",
		"--node-ip="+ip,
	)
	s.clients[z] = s.newClient(z)
}

// newClient is the test's client of zone z's apiserver.
func (s *site) newClient(z testutil.Zone) *kubernetes.Clientset {
	cfg := &rest.Config{
		Host:            "https://" + s.net.ClientAddr(z, apiserverPort),
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             1000,
		Burst:           2000,
		Timeout:         30 * time.Second,
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		s.t.Fatal(err)
	}
	return cs
}

// zoneProcsList are the unsupervised processes of zone z: its store
// members, then its apiserver.
func (s *site) zoneProcsList(z testutil.Zone) []*testutil.Proc {
	var out []*testutil.Proc
	for _, m := range s.zoneMembers(z) {
		out = append(out, m.proc)
	}
	return append(out, s.zones[z].apiserver)
}

// killZone kills every process of zone z at once (SIGKILL): the zone is
// lost, with its store member, apiserver, controllers and kwok nodes.
func (s *site) killZone(z testutil.Zone) {
	var wg sync.WaitGroup
	for _, sv := range []*supervisor{s.zones[z].kcm, s.zones[z].scheduler, s.zones[z].kwok} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sv.kill()
		}()
	}
	for _, p := range s.zoneProcsList(z) {
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Kill9()
		}()
	}
	wg.Wait()
}

// restoreZone restarts zone z: its store members on their old data dirs,
// then its control plane.
func (s *site) restoreZone(z testutil.Zone) {
	for _, m := range s.zoneMembers(z) {
		s.startMember(m)
	}
	s.startControlPlane(z)
}

// waitAPIReady waits until zone z's apiserver answers /readyz.
func (s *site) waitAPIReady(z testutil.Zone, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		if s.zones[z].apiserver.Exited() {
			s.t.Fatalf("apiserver of zone %v exited: %v\n%s", z, s.zones[z].apiserver.ExitErr(), s.zones[z].apiserver.LogTail(40))
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, last = s.clients[z].Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if last == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	s.t.Fatalf("apiserver of zone %v not ready within %v: %v", z, within, last)
}
