package clientport

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"

	"github.com/dyad-db/dyad/internal/certs"
)

// testTLS makes a server config and a client pool from a fresh CA; the
// times come from one now.
func testTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA(pkix.Name{CommonName: "test CA"}, now.Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.Issue(certs.Request{Subject: pkix.Name{CommonName: "node"}, Hosts: []string{"127.0.0.1"}, Usage: certs.UsageServer, NotBefore: now.Add(-time.Hour), Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.CertPEM)
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, pool
}

// served is a Mux with a gRPC health server and an HTTP handler behind it.
type served struct {
	addr     string
	authInfo chan credentials.AuthInfo // the AuthInfo of each gRPC call
}

func serve(t *testing.T, tlsCfg *tls.Config) *served {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(l, tlsCfg)
	s := &served{addr: l.Addr().String(), authInfo: make(chan credentials.AuthInfo, 16)}
	opts := []grpc.ServerOption{grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if p, ok := peer.FromContext(ctx); ok {
			s.authInfo <- p.AuthInfo
		}
		return h(ctx, req)
	})}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(Credentials()))
	}
	g := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(g, health.NewServer())
	h := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.Proto+" "+r.URL.Path)
	})}
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); m.Serve() }()
	go func() { defer wg.Done(); g.Serve(m.GRPC()) }()
	go func() { defer wg.Done(); h.Serve(m.HTTP()) }()
	t.Cleanup(func() {
		g.Stop()
		h.Close()
		m.Close()
		wg.Wait()
	})
	return s
}

func checkGRPC(t *testing.T, addr string, creds credentials.TransportCredentials) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	resp, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("gRPC health check: %v", err)
	}
	if resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("gRPC health: %v", resp.Status)
	}
}

func checkHTTP(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if want := "HTTP/1.1 /version"; string(body) != want {
		t.Fatalf("GET %s: %q, want %q", url, body, want)
	}
}

func TestPlaintextBothProtocols(t *testing.T) {
	s := serve(t, nil)
	// A connection that never sends a byte must not hold up the others.
	silent, err := net.Dial("tcp", s.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	checkGRPC(t, s.addr, insecure.NewCredentials())
	checkHTTP(t, &http.Client{}, "http://"+s.addr+"/version")
	checkGRPC(t, s.addr, insecure.NewCredentials())
	if ai := <-s.authInfo; ai != nil {
		t.Errorf("plaintext gRPC call has AuthInfo %v", ai)
	}
}

func TestTLSBothProtocols(t *testing.T) {
	srvCfg, pool := testTLS(t)
	s := serve(t, srvCfg)
	checkGRPC(t, s.addr, credentials.NewTLS(&tls.Config{RootCAs: pool}))
	ai := <-s.authInfo
	ti, ok := ai.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("gRPC AuthInfo is %T, want credentials.TLSInfo", ai)
	}
	if ti.State.NegotiatedProtocol != "h2" {
		t.Errorf("gRPC negotiated %q, want h2", ti.State.NegotiatedProtocol)
	}
	// A client that offers h2 and http/1.1, like curl, gets HTTP/1.1.
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	checkHTTP(t, c, "https://"+s.addr+"/version")
	// One that offers no ALPN at all, too.
	c = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	checkHTTP(t, c, "https://"+s.addr+"/version")
}

func TestTLSRejectsPlaintext(t *testing.T) {
	srvCfg, _ := testTLS(t)
	s := serve(t, srvCfg)
	resp, err := http.Get("http://" + s.addr + "/version")
	if err == nil {
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plaintext request to a TLS port answered 200: %q", body)
		}
	}
}

func TestCredentialsRefuseOtherConns(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if _, _, err := Credentials().ServerHandshake(a); !errors.Is(err, errNotMuxTLS) {
		t.Fatalf("ServerHandshake on a bare conn: %v, want %v", err, errNotMuxTLS)
	}
}

func TestCloseWithUnroutedConn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := New(l, nil)
	served := make(chan error, 1)
	go func() { served <- m.Serve() }()
	silent, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// Whether or not the silent connection is already being sniffed, Close
	// must not wait for its deadline, and Serve must then return nil.
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve after Close: %v", err)
	}
	if _, err := m.GRPC().Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("GRPC().Accept after Close: %v", err)
	}
}
