package clientport

import (
	"context"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// benchUnary measures gRPC health checks over loopback, with the server on
// the bare listener or behind a Mux: the Mux's cost on the gRPC path.
func benchUnary(b *testing.B, viaMux bool) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	g := grpc.NewServer()
	healthpb.RegisterHealthServer(g, health.NewServer())
	var wg sync.WaitGroup
	var m *Mux
	serveOn := l
	if viaMux {
		m = New(l, nil)
		serveOn = m.GRPC()
		wg.Add(1)
		go func() { defer wg.Done(); m.Serve() }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); g.Serve(serveOn) }()
	defer func() {
		g.Stop()
		if m != nil {
			m.Close()
		}
		wg.Wait()
	}()
	cc, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	hc := healthpb.NewHealthClient(cc)
	ctx := context.Background()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkUnaryDirect(b *testing.B) { benchUnary(b, false) }
func BenchmarkUnaryMux(b *testing.B)    { benchUnary(b, true) }
