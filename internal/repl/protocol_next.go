//go:build dyad_protocol_next

package repl

// protocolNext: this build also speaks ProtocolV3, the "next version" the
// upgrade test pairs with a release build (go build -tags
// dyad_protocol_next). See ProtocolV3.
const protocolNext = 1
