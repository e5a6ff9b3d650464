package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dyad-db/dyad/internal/api"
	"github.com/dyad-db/dyad/internal/clientport"
	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/ddsnet"
	"github.com/dyad-db/dyad/internal/failpoint"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/storage"
)

// serveFlags are dyad serve's flags. Names and defaults follow etcd's.
type serveFlags struct {
	name                string
	dataDir             string
	listenClientURLs    string
	advertiseClientURLs string
	listenMetricsURLs   string
	listenHTTPURLs      string
	maxRequestBytes     int
	maxTxnOps           int
	quotaBackendBytes   int64
	autoCompactionMode  string
	autoCompactionRet   string
	certFile            string
	keyFile             string
	trustedCAFile       string
	clientCertAuth      bool
	logLevel            string
	logFormat           string
	progressInterval    time.Duration
	unsafeNoFsync       bool
	batchInterval       time.Duration
	batchLimit          int
	journalMax          int64
	shutdownGrace       time.Duration
	printDDSConfig      bool
	enablePprof         bool
	cluster             clusterFlags
	compat              compatFlags
}

func serveCmd() *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a dyad node (single node unless a peer is configured)",
		Long: `serve runs one dyad node: a durable MVCC store behind the etcd v3 gRPC API.

etcd's command lines carry over. Flag names and defaults are etcd's; every
flag of kubeadm's generated etcd static pod and of common etcd systemd units
is accepted. Those that have no meaning in dyad (Raft tuning, peer URLs,
snapshot counts, feature gates, ...) are marked "accepted and ignored" below
and named in one log line each at start-up. --initial-cluster naming only
this node (kubeadm's form) runs a single node; naming two makes a pair.

Every flag can also come from the environment as DYAD_<FLAG> or etcd's
ETCD_<FLAG> (--listen-client-urls: DYAD_LISTEN_CLIENT_URLS or
ETCD_LISTEN_CLIENT_URLS). The command line wins over the environment, and
DYAD_ over ETCD_. --config-file (or DYAD_CONFIG_FILE, ETCD_CONFIG_FILE)
reads etcd's YAML configuration format instead; as in etcd, other flags and
environment variables are then ignored.

The client port serves the etcd v3 gRPC API and, on the same port and with
the same TLS, /version, /health, /livez, /readyz and /metrics over HTTP/1.1
(kubeadm's external-etcd preflight reads /version). --listen-metrics-urls
serves the same HTTP endpoints on a separate port: plain for http://, and
for https:// with the client port's TLS and client-certificate rules.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServe(cmd.Context(), cmd.Flags(), f, cmd.OutOrStdout(), ddsnet.New)
		},
	}
	bindServeFlags(cmd.Flags(), f)
	return cmd
}

// bindServeFlags registers serve's flags on fl, bound to f.
func bindServeFlags(fl *pflag.FlagSet, f *serveFlags) {
	fl.StringVar(&f.name, "name", "default", "Human-readable name for this member.")
	fl.StringVar(&f.dataDir, "data-dir", "", "Path to the data directory (default \"${name}.dyad\"). The data file is member/snap/db, in etcd's format.")
	fl.StringVar(&f.listenClientURLs, "listen-client-urls", "http://127.0.0.1:2379", "Comma-separated URLs to serve the etcd v3 gRPC API on. https:// URLs need --cert-file/--key-file.")
	fl.StringVar(&f.advertiseClientURLs, "advertise-client-urls", "", "Comma-separated client URLs to advertise in MemberList (default: the listen URLs).")
	fl.StringVar(&f.listenHTTPURLs, "listen-client-http-urls", "", "Comma-separated URLs serving only the HTTP endpoints (/version, /health, /livez, /readyz, /metrics), with the client port's TLS and client-certificate rules for https://, as etcd's flag of that name. The client URLs keep serving them too.")
	fl.StringVar(&f.listenMetricsURLs, "listen-metrics-urls", "", "Comma-separated URLs serving /metrics (Prometheus), /health, /livez and /readyz. https:// URLs use the client TLS flags (certificate, and client certificates when --trusted-ca-file is set), as etcd does. Empty: not served.")
	fl.IntVar(&f.maxRequestBytes, "max-request-bytes", 1.5*1024*1024, "Largest client request accepted, in bytes; larger ones get \"etcdserver: request is too large\".")
	fl.IntVar(&f.maxTxnOps, "max-txn-ops", 128, "Most operations allowed in one txn (per compare, success and failure list).")
	fl.Int64Var(&f.quotaBackendBytes, "quota-backend-bytes", 0, "Size of the data file that raises the NOSPACE alarm (0: 2 GiB, etcd's default).")
	fl.StringVar(&f.autoCompactionMode, "auto-compaction-mode", "periodic", "Auto compaction: \"periodic\" (keep a time window) or \"revision\" (keep a number of revisions).")
	fl.StringVar(&f.autoCompactionRet, "auto-compaction-retention", "0", "Auto compaction retention: a duration or hours for periodic (\"1h\", \"30m\", \"1\"), a revision count for revision. 0 disables.")
	fl.StringVar(&f.certFile, "cert-file", "", "Path to the client server TLS certificate.")
	fl.StringVar(&f.keyFile, "key-file", "", "Path to the client server TLS key.")
	fl.StringVar(&f.trustedCAFile, "trusted-ca-file", "", "Path to the CA bundle that signs client certificates. As in etcd, setting it requires and verifies client certificates (mTLS) whatever --client-cert-auth says.")
	fl.BoolVar(&f.clientCertAuth, "client-cert-auth", false, "Require and verify client certificates signed by --trusted-ca-file (mTLS).")
	fl.StringVar(&f.logLevel, "log-level", "info", "Log level: debug, info, warn or error.")
	fl.StringVar(&f.logFormat, "log-format", "json", "Log format on stderr: json, or text (etcd's \"console\" is text).")
	fl.DurationVar(&f.progressInterval, "watch-progress-notify-interval", 10*time.Minute, "Period of progress notifications to watchers that asked for them.")
	fl.DurationVar(&f.progressInterval, "experimental-watch-progress-notify-interval", 10*time.Minute, "Old etcd name of --watch-progress-notify-interval.")
	fl.MarkDeprecated("experimental-watch-progress-notify-interval", "use --watch-progress-notify-interval")
	fl.DurationVar(&f.batchInterval, "backend-batch-interval", storage.DefaultBatchInterval, "Longest time a write waits, already durable in the journal (member/dyad-wal), before the data file commits it in the background, as etcd's flag of that name. A start replays what the data file lacks from the journal.")
	fl.IntVar(&f.batchLimit, "backend-batch-limit", storage.DefaultBatchLimit, "Most puts and deletes the data file holds uncommitted before it commits them, as etcd's flag of that name.")
	fl.Int64Var(&f.journalMax, "experimental-journal-max-bytes", 0, "Size of the journal (member/dyad-wal) past which the node commits the data file and starts a new journal (0: 64 MiB). For tests that want that switch often; there is no reason to change it in production.")
	fl.BoolVar(&f.unsafeNoFsync, "unsafe-no-fsync", false, "Disable fsync. Loses acknowledged writes on power loss: for benchmarks of upper layers only.")
	fl.BoolVar(&f.printDDSConfig, "print-dds-config", false, "Print the Cyclone DDS XML configuration these flags give the pair's replication (the same text the node passes to Cyclone), and exit without opening the data dir or any socket. Needs a two-member --initial-cluster.")
	fl.BoolVar(&f.enablePprof, "enable-pprof", false, "Serve Go's runtime profiles (CPU, heap, goroutines, and sampled mutex and block contention) under /debug/pprof/ on the client, client HTTP and metrics URLs, as etcd does. Off by default: a profile shows the process's internals and costs CPU while it runs, so enable it only where those listeners are trusted.")
	fl.DurationVar(&f.shutdownGrace, "shutdown-grace", 5*time.Second, "On SIGTERM, how long a primary may take to hand its role to a live replica, and then how long in-flight requests may finish before connections are closed.")
	f.cluster.register(fl)
	f.compat.register(fl)
}

func newLogger(level, format string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	case "text", "console": // etcd calls its human-readable format "console"
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json, text or console", format)
}

func splitURLs(s string) ([]*url.URL, error) {
	var out []*url.URL
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		u, err := url.Parse(part)
		if err != nil {
			return nil, fmt.Errorf("invalid URL %q: %w", part, err)
		}
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil, fmt.Errorf("invalid URL %q: scheme must be http or https", part)
		}
		if u.Host == "" {
			return nil, fmt.Errorf("invalid URL %q: no host:port", part)
		}
		out = append(out, u)
	}
	return out, nil
}

func tlsConfig(f *serveFlags) (*tls.Config, error) {
	if f.certFile == "" && f.keyFile == "" {
		if f.clientCertAuth {
			return nil, errors.New("--client-cert-auth needs --cert-file and --key-file")
		}
		return nil, nil
	}
	if f.certFile == "" || f.keyFile == "" {
		return nil, errors.New("--cert-file and --key-file go together")
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading TLS key pair: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}}
	if f.trustedCAFile != "" {
		pem, err := os.ReadFile(f.trustedCAFile)
		if err != nil {
			return nil, fmt.Errorf("--trusted-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--trusted-ca-file %s holds no PEM certificate", f.trustedCAFile)
		}
		cfg.ClientCAs = pool
	}
	if f.clientCertAuth && cfg.ClientCAs == nil {
		return nil, errors.New("--client-cert-auth needs --trusted-ca-file")
	}
	// As in etcd, --trusted-ca-file alone turns client certificate
	// authentication on: a site that moves etcd's flags over keeps mTLS.
	if cfg.ClientCAs != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// resolveFlags completes the command line from --config-file or the
// environment (etcd's precedence, see serve --help) and returns what to log
// about it once the logger exists.
func resolveFlags(fl *pflag.FlagSet, f *serveFlags) ([]note, error) {
	var notes []note
	if p := configFilePath(f.compat.configFile, os.Getenv); p != "" {
		n, err := applyConfigFile(fl, p)
		if err != nil {
			return nil, err
		}
		notes = append(n, note{"configuration file loaded; other flags and environment variables are ignored", []any{"file", p}})
	} else {
		n, err := applyEnv(fl, os.Environ())
		if err != nil {
			return nil, err
		}
		notes = n
	}
	n, err := f.compat.ignoredNotes(fl)
	if err != nil {
		return nil, err
	}
	return append(notes, n...), nil
}

// runServe runs the node until ctx ends or it fails; with
// --print-dds-config it only writes the DDS configuration to out.
// newTransport makes a pair's DDS transport (ddsnet.New; tests replace it).
func runServe(parent context.Context, fl *pflag.FlagSet, f *serveFlags, out io.Writer, newTransport func(ddsnet.Config) (*ddsnet.Net, error)) error {
	notes, err := resolveFlags(fl, f)
	if err != nil {
		return err
	}
	if f.printDDSConfig {
		return printDDSConfig(out, f)
	}
	log, err := newLogger(f.logLevel, f.logFormat)
	if err != nil {
		return err
	}
	for _, n := range notes {
		log.Info(n.msg, n.args...)
	}
	clientURLs, err := splitURLs(f.listenClientURLs)
	if err != nil {
		return fmt.Errorf("--listen-client-urls: %w", err)
	}
	if len(clientURLs) == 0 {
		return errors.New("--listen-client-urls: at least one URL is needed")
	}
	metricsURLs, err := splitURLs(f.listenMetricsURLs)
	if err != nil {
		return fmt.Errorf("--listen-metrics-urls: %w", err)
	}
	httpURLs, err := splitURLs(f.listenHTTPURLs)
	if err != nil {
		return fmt.Errorf("--listen-client-http-urls: %w", err)
	}
	advertise := f.advertiseClientURLs
	if advertise == "" {
		advertise = f.listenClientURLs
	}
	advURLs, err := splitURLs(advertise)
	if err != nil {
		return fmt.Errorf("--advertise-client-urls: %w", err)
	}
	tlsCfg, err := tlsConfig(f)
	if err != nil {
		return err
	}
	for _, set := range []struct {
		flag string
		urls []*url.URL
	}{{"--listen-client-urls", clientURLs}, {"--listen-client-http-urls", httpURLs}} {
		for _, u := range set.urls {
			if u.Scheme == "https" && tlsCfg == nil {
				return fmt.Errorf("%s %s is https but no --cert-file/--key-file is given", set.flag, u)
			}
			if u.Scheme == "http" && tlsCfg != nil {
				return fmt.Errorf("%s %s is http but TLS is configured: use https:// URLs", set.flag, u)
			}
		}
	}
	if _, _, err := server.ParseRetention(f.autoCompactionMode, f.autoCompactionRet); err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := server.Defaults()
	cfg.Name = f.name
	cfg.DataDir = f.dataDir
	if cfg.DataDir == "" {
		cfg.DataDir = f.name + ".dyad"
	}
	for _, u := range advURLs {
		cfg.ClientURLs = append(cfg.ClientURLs, u.String())
	}
	cfg.MaxRequestBytes = f.maxRequestBytes
	cfg.MaxTxnOps = f.maxTxnOps
	if f.quotaBackendBytes > 0 {
		cfg.QuotaBackendBytes = f.quotaBackendBytes
	}
	cfg.AutoCompactionMode = f.autoCompactionMode
	cfg.AutoCompactionRetention = f.autoCompactionRet
	cfg.WatchProgressNotifyInterval = f.progressInterval
	cfg.UnsafeNoFsync = f.unsafeNoFsync
	cfg.BackendBatchInterval = f.batchInterval
	cfg.BackendBatchLimit = f.batchLimit
	cfg.JournalMaxBytes = f.journalMax
	cfg.Logger = log
	cfg.Metrics = server.NewMetrics(reg)

	plan, err := f.cluster.plan(f.name)
	if err != nil {
		return err
	}
	if plan == nil && f.cluster.sec != (peerSecurityFlags{pluginDir: f.cluster.sec.pluginDir}) {
		log.Info("peer TLS flags unused: a single node has no peer to secure", "initial-cluster", f.cluster.initialCluster)
	}

	// Every port is bound before the DDS participant is made and the data
	// file opened (listenAll says why): starting a participant took from
	// 5 to 90 ms on a loaded machine, and a client's first attempt to
	// connect should not be refused for it.
	lns, err := listenAll(clientURLs, metricsURLs, httpURLs, tlsCfg)
	if err != nil {
		return err
	}
	// Until the node owns it, the transport is closed here on failure.
	failEarly := func(err error) error {
		lns.close()
		if cfg.Repl != nil {
			cfg.Repl.Transport.Close()
		}
		return err
	}
	if plan != nil {
		cfg.ClusterID, cfg.MemberID = plan.clusterID, plan.memberID
		cfg.PeerURLs = []string{plan.self.url}
		cfg.Peer = &server.Member{ID: plan.peerID, Name: plan.peer.name, PeerURLs: []string{plan.peer.url}}
		tr, err := newTransport(ddsnet.Config{
			DDS:     ddsConfig(f, plan),
			Cluster: plan.clusterID,
			Node:    plan.memberID,
			WaitSet: f.cluster.ddsWaitSet,
			// The loop's sends never wait for the peer: a writer at its
			// high-water mark queues them (up to Backlog) and refuses the
			// rest; entries not sent are caught up from the log.
		})
		if err != nil {
			return failEarly(fmt.Errorf("dds: %w", err))
		}
		reg.MustRegister(tr.Collectors()...)
		plan.repl.Transport = tr
		cfg.Repl = &plan.repl
		if w := rmemShortfall(readRmemMax(), ddsConfig(f, plan).WhcHigh); w != "" {
			log.Warn(w, "sysctl", "net.core.rmem_max")
		}
		log.Info("two-zone pair", "self", plan.self.name, "peer", plan.peer.name, "peer-host", plan.peer.host,
			"cluster-id", fmt.Sprintf("%x", plan.clusterID), "member-id", fmt.Sprintf("%x", plan.memberID),
			"dds-domain", f.cluster.ddsDomain, "dds-interface", plan.iface, "dds-security", plan.securityXML != "", "preferred", plan.repl.Preferred)
	}

	node, err := server.New(cfg)
	if err != nil {
		return failEarly(err)
	}
	defer node.Close()

	ctx, stop := signal.NotifyContext(parent, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	// Each client listener carries gRPC and HTTP/1.1, as etcd's does; the
	// muxes terminate TLS, so gRPC gets the muxes' credentials.
	apiOpts := api.Options{MaxRequestBytes: f.maxRequestBytes, MaxTxnOps: f.maxTxnOps, Registry: reg}
	if tlsCfg != nil {
		apiOpts.Creds = clientport.Credentials()
	}
	grpcSrv, healthSrv := api.New(node, apiOpts)
	httpSrv := &http.Server{Handler: opsHandler(node, reg, f.enablePprof), ReadHeaderTimeout: 10 * time.Second}
	muxes := make([]*clientport.Mux, len(lns.client))
	for i, l := range lns.client {
		muxes[i] = clientport.New(l, tlsCfg)
	}

	nodeCtx, stopNode := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errc := make(chan error, 3*len(lns.client)+len(lns.http)+1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := node.Run(nodeCtx); err != nil {
			errc <- fmt.Errorf("node stopped: %w", err)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		api.RunHealth(nodeCtx, node, healthSrv)
	}()
	for _, m := range muxes {
		wg.Add(3)
		go func() {
			defer wg.Done()
			if err := m.Serve(); err != nil {
				errc <- err
			}
		}()
		go func() {
			defer wg.Done()
			if err := grpcSrv.Serve(m.GRPC()); err != nil {
				errc <- err
			}
		}()
		go func() {
			defer wg.Done()
			if err := httpSrv.Serve(m.HTTP()); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
	}
	for _, l := range lns.http {
		wg.Add(1)
		go func(l net.Listener) {
			defer wg.Done()
			if err := httpSrv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}(l)
	}
	log.Info("serving", "name", f.name, "client-urls", f.listenClientURLs, "metrics-urls", f.listenMetricsURLs,
		"tls", tlsCfg != nil, "client-cert-auth", tlsCfg != nil && tlsCfg.ClientAuth == tls.RequireAndVerifyClientCert, "etcd-version", server.EtcdVersion, "dyad-version", readBuildInfo().Short())

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down", "reason", "signal")
	case runErr = <-errc:
		log.Error("shutting down", "err", runErr)
	}
	// A primary stopped on purpose first hands its role to a live replica:
	// writes pause for a hand-over rather than for a failover. Requests keep
	// being served meanwhile (they queue, then go to the new primary).
	if runErr == nil {
		hctx, cancel := context.WithTimeout(context.Background(), f.shutdownGrace)
		if err := node.StepDown(hctx); err != nil {
			log.Warn("could not hand the primary role over before stopping", "err", err)
		}
		cancel()
	}
	// Drain: stop taking new RPCs, let in-flight ones finish for a grace
	// period, then close what is left; only then stop the node so that every
	// write that was answered has been applied and synced.
	healthSrv.Shutdown()
	drained := make(chan struct{})
	go func() { grpcSrv.GracefulStop(); close(drained) }()
	// After a fatal error (a failed storage commit) the node can answer
	// nothing more, so it does not wait the grace for streams such as
	// watches to end: it closes them at once so that its supervisor
	// restarts it sooner.
	grace := f.shutdownGrace
	if runErr != nil {
		grace = 0
	}
	select {
	case <-drained:
	case <-time.After(grace):
		grpcSrv.Stop()
		<-drained
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	httpSrv.Shutdown(shutCtx)
	cancel()
	for _, m := range muxes {
		m.Close()
	}
	stopNode()
	wg.Wait()
	log.Info("stopped")
	return runErr
}

// clusterVersion is etcd's cluster version for a server version: its
// major.minor with patch 0 ("3.5.17" -> "3.5.0").
func clusterVersion(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) < 2 {
		return v
	}
	return parts[0] + "." + parts[1] + ".0"
}

// opsHandler serves the operational endpoints on the metrics listeners and,
// beside gRPC, on the client listeners; with pprof, Go's profiles too.
func opsHandler(node *server.Server, reg *prometheus.Registry, pprof bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	health := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		body := map[string]string{"health": "true", "reason": ""}
		if err := node.Healthy(); err != nil {
			body = map[string]string{"health": "false", "reason": err.Error()}
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(body)
	}
	mux.HandleFunc("/health", health)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-node.Ready():
		default:
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		if err := node.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "ok") })
	// etcd's /version: kubeadm's external-etcd preflight reads etcdserver.
	mux.HandleFunc("/version", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]string{"etcdserver": server.EtcdVersion, "etcdcluster": clusterVersion(server.EtcdVersion)})
	})
	if pprof {
		servePprof(mux)
	}
	if h := failpoint.Handler(); h != nil { // only in a failpoints build
		mux.Handle("/debug/failpoints", h)
		mux.Handle("/debug/failpoints/", h)
	}
	return mux
}

// ddsConfig is the DDS configuration of a pair node started with f.
func ddsConfig(f *serveFlags, plan *pairPlan) dds.Config {
	whc := int64(2 * f.maxRequestBytes)
	if whc < dds.DefaultWhcHigh {
		whc = dds.DefaultWhcHigh
	}
	return dds.Config{
		Domain: f.cluster.ddsDomain, Interface: plan.iface, Peers: []string{plan.peer.host},
		WhcHigh: whc, SecurityXML: plan.securityXML, ExtraXML: plan.extraXML,
		// The replication loop sends each turn's messages with one
		// SendAll (internal/server, flushSends), whose messages of one
		// class then share datagrams; Send still flushes every write.
		WriteBatch: true,
	}
}

// rmemMaxPath is where Linux shows the largest socket receive buffer a
// process may ask for.
const rmemMaxPath = "/proc/sys/net/core/rmem_max"

// readRmemMax reads net.core.rmem_max (bytes); -1 when it cannot be read
// (not Linux, no /proc).
func readRmemMax() int64 {
	b, err := os.ReadFile(rmemMaxPath)
	if err != nil {
		return -1
	}
	v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return -1
	}
	return v
}

// rmemShortfall says what is wrong when the kernel caps the DDS sockets'
// receive buffer (dds.Config.SocketReceiveBuffer, the writers'
// high-water mark want) below what a writer may send in one burst, and ""
// when it does not or rmemMax is unknown (< 0). Cyclone takes what the
// kernel grants without an error, and a burst the buffer cannot hold is
// dropped and repaired only after a NACK round: on a host left at Linux's
// default (208 KiB) the replication stream of 4 KiB writes runs at about a
// tenth of its rate (docs/BENCHMARKS.md, dyad perf).
func rmemShortfall(rmemMax, want int64) string {
	if rmemMax < 0 || rmemMax >= want {
		return ""
	}
	return fmt.Sprintf("net.core.rmem_max is %d bytes, below the %d bytes the DDS sockets ask for: bursts of replication can overflow the receive buffer and wait for retransmission; raise it on both zones (sysctl -w net.core.rmem_max=%d)", rmemMax, want, want)
}

// printDDSConfig writes the Cyclone DDS XML that serve with f would give
// its participant, byte for byte (pipe it to xmllint --format to read it),
// without opening the data dir or any socket.
func printDDSConfig(out io.Writer, f *serveFlags) error {
	plan, err := f.cluster.plan(f.name)
	if err != nil {
		return err
	}
	if plan == nil {
		return errors.New("--print-dds-config: a single node uses no DDS; --initial-cluster must name two members")
	}
	cfg := ddsConfig(f, plan)
	if err := cfg.Validate(); err != nil {
		return err
	}
	_, err = fmt.Fprintln(out, cfg.XML())
	return err
}
