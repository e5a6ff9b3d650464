package clientport

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// http2Preface is what every HTTP/2 client, gRPC included, sends first
// (RFC 9113 §3.4). No HTTP/1.x request starts with it.
const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// DefaultSniffTimeout bounds the TLS handshake plus the first bytes of a new
// connection; a client silent for longer is dropped.
const DefaultSniffTimeout = 10 * time.Second

// Mux splits the connections of one listener between GRPC and HTTP.
type Mux struct {
	l     net.Listener
	tls   *tls.Config // nil: plaintext
	grpc  *subListener
	http  *subListener
	sniff time.Duration

	// mu orders wg.Add against Close's wg.Wait: a WaitGroup's Add from
	// zero must happen before Wait, so Serve adds only under mu while
	// closed is false, and Close sets closed under mu before it waits.
	mu        sync.Mutex
	closed    bool
	wg        sync.WaitGroup  // the per-connection routing goroutines
	ctx       context.Context // done once Close runs
	cancel    context.CancelFunc
	closeOnce sync.Once
}

// New wraps l. With tlsCfg the Mux terminates TLS (tlsCfg's certificates and
// client-certificate policy apply to both protocols); the gRPC server must
// then be built with Credentials instead of its own TLS credentials.
func New(l net.Listener, tlsCfg *tls.Config) *Mux {
	m := &Mux{l: l, sniff: DefaultSniffTimeout}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	if tlsCfg != nil {
		m.tls = tlsCfg.Clone()
		// Server preference order decides (crypto/tls): HTTP/1.1 first, so a
		// client offering both speaks HTTP/1.1; gRPC offers only h2.
		m.tls.NextProtos = []string{"http/1.1", "h2"}
	}
	m.grpc = newSubListener(l.Addr())
	m.http = newSubListener(l.Addr())
	return m
}

// GRPC is the listener to give grpc.Server.Serve.
func (m *Mux) GRPC() net.Listener { return m.grpc }

// HTTP is the listener to give http.Server.Serve. Its connections carry
// HTTP/1.x only.
func (m *Mux) HTTP() net.Listener { return m.http }

// Serve accepts connections until Close or a listener error, and routes each
// one. It returns nil after Close.
func (m *Mux) Serve() error {
	var tempDelay time.Duration
	for {
		c, err := m.l.Accept()
		if err != nil {
			if m.ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // e.g. EMFILE surfaces as temporary: back off as net/http does
				tempDelay = min(max(2*tempDelay, 5*time.Millisecond), time.Second)
				select {
				case <-time.After(tempDelay):
					continue
				case <-m.ctx.Done():
					return nil
				}
			}
			return err
		}
		tempDelay = 0
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			c.Close()
			return nil
		}
		m.wg.Add(1)
		m.mu.Unlock()
		go m.route(c)
	}
}

// Close stops Serve, closes the listener and both sub-listeners, and waits
// for connections still being routed (they are closed).
func (m *Mux) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.mu.Lock()
		m.closed = true
		m.mu.Unlock()
		m.cancel()
		err = m.l.Close()
		m.grpc.Close()
		m.http.Close()
	})
	m.wg.Wait()
	return err
}

// route does the TLS handshake and the sniff, then hands c to a server.
func (m *Mux) route(c net.Conn) {
	defer m.wg.Done()
	// ctx ends at the sniff deadline or at Close; either way a handshake or
	// sniff still in progress is cut off by an immediate I/O deadline.
	ctx, cancel := context.WithTimeout(m.ctx, m.sniff)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	var state *tls.ConnectionState
	if m.tls != nil {
		tc := tls.Server(c, m.tls)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return
		}
		cs := tc.ConnectionState()
		state, c = &cs, tc
	}
	br := bufio.NewReader(c)
	h2, err := isHTTP2(br)
	if !stop() || err != nil { // the deadline fired, or the client went away
		c.Close()
		return
	}
	c.SetDeadline(time.Time{})
	target := m.http
	if h2 {
		target = m.grpc
	}
	sc := &conn{Conn: c, r: br, state: state}
	select {
	case target.conns <- sc:
	case <-target.done:
		c.Close()
	case <-m.ctx.Done():
		c.Close()
	}
}

// isHTTP2 reads until the bytes either match the whole HTTP/2 preface or
// stop matching it. It asks for one byte more at a time, so a short HTTP/1.x
// request is recognised on its first bytes and never waits for 24.
func isHTTP2(br *bufio.Reader) (bool, error) {
	for n := 1; n <= len(http2Preface); n++ {
		b, err := br.Peek(n)
		if err != nil {
			return false, err
		}
		if b[n-1] != http2Preface[n-1] {
			return false, nil
		}
	}
	return true, nil
}

// conn replays the sniffed bytes, then reads the connection directly.
// Like any net.Conn given to gRPC or net/http, it is read by one goroutine
// at a time.
type conn struct {
	net.Conn
	r     *bufio.Reader // nil once its buffered bytes are consumed
	state *tls.ConnectionState
}

func (c *conn) Read(p []byte) (int, error) {
	if c.r != nil {
		if c.r.Buffered() > 0 {
			return c.r.Read(p)
		}
		c.r = nil
	}
	return c.Conn.Read(p)
}

// subListener hands routed connections to one server.
type subListener struct {
	addr      net.Addr
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newSubListener(addr net.Addr) *subListener {
	return &subListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (s *subListener) Accept() (net.Conn, error) {
	select {
	case c := <-s.conns:
		return c, nil
	case <-s.done:
		return nil, net.ErrClosed
	}
}

// Close stops this sub-listener only: the servers close their listeners on
// shutdown, and the Mux keeps routing the other protocol.
func (s *subListener) Close() error {
	s.closeOnce.Do(func() { close(s.done) })
	return nil
}

func (s *subListener) Addr() net.Addr { return s.addr }

// Credentials are the gRPC transport credentials for a Mux that terminates
// TLS: the handshake is already done, so they only pass the connection on
// with its TLS state as the peer's AuthInfo.
func Credentials() credentials.TransportCredentials { return muxCreds{} }

type muxCreds struct{}

var errNotMuxTLS = errors.New("clientport: connection did not come through a TLS Mux")

func (muxCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	mc, ok := c.(*conn)
	if !ok || mc.state == nil {
		return nil, nil, errNotMuxTLS
	}
	return c, credentials.TLSInfo{State: *mc.state, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}, nil
}

func (muxCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("clientport: server-side credentials only")
}

func (muxCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (c muxCreds) Clone() credentials.TransportCredentials { return c }

func (muxCreds) OverrideServerName(string) error { return nil }
