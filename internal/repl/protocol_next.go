//go:build dyad_protocol_next

package repl

// protocolNext: this build also speaks ProtocolV5, the "next version" the
// upgrade test pairs with a release build (go build -tags
// dyad_protocol_next). See ProtocolV5.
const protocolNext = 1
