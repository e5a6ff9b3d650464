package api

import (
	"crypto/tls"
	"math"
	"time"

	grpcprom "github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus"
	"github.com/prometheus/client_golang/prometheus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/dyad-db/dyad/internal/server"
)

// grpcOverheadBytes is what etcd allows on top of --max-request-bytes for the
// gRPC envelope, so an over-large request reaches validation and gets etcd's
// "request is too large" instead of a transport error.
const grpcOverheadBytes = 512 * 1024

// defaultStreamWorkers is how many goroutines the gRPC server keeps to run
// RPCs on (grpc.NumStreamWorkers). Without them gRPC starts a goroutine
// for every RPC, whose stack then grows again through the handler chain
// on every call; a kept worker's stack has grown already. An RPC that
// finds every worker busy still gets a goroutine of its own, so the
// number only bounds how many RPCs at once avoid that cost: 128 covers
// etcd's benchmark at 64 clients with room for long-lived watch streams,
// which hold a worker for as long as they last. The workers are the gRPC
// server's: Stop and GracefulStop end them.
const defaultStreamWorkers = 128

// Options configure the gRPC surface.
type Options struct {
	MaxRequestBytes int
	MaxTxnOps       int
	// StreamWorkers is how many goroutines serve RPCs
	// (defaultStreamWorkers when 0; negative: none, a goroutine per RPC).
	StreamWorkers int
	// TLS, when set, serves TLS (and mTLS when it requires client certs).
	TLS *tls.Config
	// Registry, when set, gets the standard gRPC server series
	// (grpc_server_started_total, grpc_server_handled_total,
	// grpc_server_handling_seconds, grpc_server_msg_{received,sent}_total),
	// the ones etcd exports and its alerts and dashboards read.
	Registry prometheus.Registerer
	// Creds, when set, replace TLS as the transport credentials: for
	// listeners that terminate TLS themselves (internal/clientport).
	Creds credentials.TransportCredentials

	// grpcCodec serves with gRPC's own codec instead of codec.go's: for
	// the benchmarks that compare the two.
	grpcCodec bool
}

// New builds the gRPC server with every etcd service and the standard gRPC
// health service registered. The returned health server is SERVING; callers
// flip it on shutdown.
func New(s *server.Server, opts Options) (*grpc.Server, *health.Server) {
	unary := []grpc.UnaryServerInterceptor{unaryLeader(s)}
	stream := []grpc.StreamServerInterceptor{streamLeader(s)}
	var rpcMetrics *grpcprom.ServerMetrics
	if opts.Registry != nil {
		// The histogram keeps the library's default buckets
		// (prometheus.DefBuckets), which are etcd's too, so etcd's
		// quantile queries read the same bucket bounds.
		rpcMetrics = grpcprom.NewServerMetrics(grpcprom.WithServerHandlingTimeHistogram())
		opts.Registry.MustRegister(rpcMetrics)
		// Outermost, so that requests refused by the leader check are
		// counted with their codes too.
		unary = append([]grpc.UnaryServerInterceptor{rpcMetrics.UnaryServerInterceptor()}, unary...)
		stream = append([]grpc.StreamServerInterceptor{rpcMetrics.StreamServerInterceptor()}, stream...)
	}
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRequestBytes + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
	}
	if !opts.grpcCodec {
		// etcd's messages encoded once, by their own code (codec.go).
		gopts = append(gopts, grpc.ForceServerCodecV2(newCodec()))
	}
	switch w := opts.StreamWorkers; {
	case w == 0:
		gopts = append(gopts, grpc.NumStreamWorkers(defaultStreamWorkers))
	case w > 0:
		gopts = append(gopts, grpc.NumStreamWorkers(uint32(w)))
	}
	switch {
	case opts.Creds != nil:
		gopts = append(gopts, grpc.Creds(opts.Creds))
	case opts.TLS != nil:
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(opts.TLS)))
	}
	g := grpc.NewServer(gopts...)
	pb.RegisterKVServer(g, &kvServer{s: s, opts: opts})
	pb.RegisterWatchServer(g, NewWatchServer(s.Hub(), s.FillHeader, opts.MaxRequestBytes))
	pb.RegisterLeaseServer(g, &leaseServer{s: s})
	pb.RegisterMaintenanceServer(g, &maintenanceServer{s: s})
	pb.RegisterClusterServer(g, &clusterServer{s: s})
	pb.RegisterAuthServer(g, &authServer{s: s})
	g.RegisterService(pairServiceDesc(), s)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	if rpcMetrics != nil {
		// Every method's series exist from the start (at zero), so rate()
		// and absent-based alerts see them before the first call.
		rpcMetrics.InitializeMetrics(g)
	}
	return g, hs
}
