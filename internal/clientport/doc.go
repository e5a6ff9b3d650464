// Package clientport serves gRPC and HTTP/1.x on one client listener, as
// etcd does on its client port: the etcd v3 API for clients, and /version,
// /health, /livez, /readyz and /metrics for kubeadm's preflight, probes and
// curl.
//
// # How a connection is routed
//
// The split happens per connection, before either server sees it, so the
// gRPC server keeps serving its own connections natively (grpc.Server.Serve,
// with its flow control, keepalive enforcement and stream limits) rather than
// through net/http's HTTP/2 server:
//
//   - With TLS, the Mux does the handshake itself. Its ALPN preference is
//     "http/1.1" then "h2": gRPC clients offer only "h2" and get it; curl and
//     browsers, which offer both, get HTTP/1.1 and so reach the HTTP handler.
//     gRPC then runs over the finished TLS connection with Credentials, which
//     hand the connection state on as credentials.TLSInfo.
//   - On the decrypted (or plaintext) stream the Mux reads only as far as it
//     takes to tell the HTTP/2 client preface ("PRI * HTTP/2.0...") from an
//     HTTP/1.x request line. HTTP/2 goes to gRPC, everything else to HTTP.
//     The bytes read are replayed to whichever server gets the connection.
//
// The handshake and the sniff run on a goroutine per connection, bounded by
// a deadline, so a slow or silent client never holds up Accept.
//
// # Ownership
//
// Serve owns the accept loop and every per-connection goroutine; Close stops
// the loop, closes both sub-listeners and waits for those goroutines. The
// servers own the connections they accept from the sub-listeners.
package clientport
