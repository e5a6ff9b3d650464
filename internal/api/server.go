package api

import (
	"crypto/tls"
	"math"
	"time"

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

// Options configure the gRPC surface.
type Options struct {
	MaxRequestBytes int
	MaxTxnOps       int
	// TLS, when set, serves TLS (and mTLS when it requires client certs).
	TLS *tls.Config
	// Creds, when set, replace TLS as the transport credentials: for
	// listeners that terminate TLS themselves (internal/clientport).
	Creds credentials.TransportCredentials
}

// New builds the gRPC server with every etcd service and the standard gRPC
// health service registered. The returned health server is SERVING; callers
// flip it on shutdown.
func New(s *server.Server, opts Options) (*grpc.Server, *health.Server) {
	gopts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(opts.MaxRequestBytes + grpcOverheadBytes),
		grpc.MaxSendMsgSize(math.MaxInt32),
		grpc.MaxConcurrentStreams(math.MaxUint32),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 2 * time.Hour, Timeout: 20 * time.Second}),
		grpc.ChainUnaryInterceptor(unaryLeader(s)),
		grpc.ChainStreamInterceptor(streamLeader(s)),
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
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(g, hs)
	return g, hs
}
