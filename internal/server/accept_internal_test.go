package server

import (
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// The protocol versions of the core are the transport's envelope versions
// (the core may not import the transport to share them).
func TestProtocolVersionsAreEnvelopeVersions(t *testing.T) {
	if repl.ProtocolV1 != transport.VersionBase || repl.ProtocolV2 != transport.VersionAddressed {
		t.Fatalf("repl speaks %d and %d, the transport lays out %d and %d", repl.ProtocolV1, repl.ProtocolV2, transport.VersionBase, transport.VersionAddressed)
	}
}
