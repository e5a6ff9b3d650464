//go:build !dyad_protocol_next

package repl

// protocolNext raises MaxProtocol by one in a dyad_protocol_next build
// (protocol_next.go); a release build speaks up to ProtocolV4.
const protocolNext = 0
