package server

import (
	"testing"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// The protocol versions of the core are the transport's envelope versions
// (the core may not import the transport to share them), and every version
// this build speaks beyond the first carries the addressee.
func TestProtocolVersionsAreEnvelopeVersions(t *testing.T) {
	for _, v := range []struct {
		name      string
		repl, env uint16
	}{
		{"base", repl.ProtocolV1, transport.VersionBase},
		{"addressed", repl.ProtocolV2, transport.VersionAddressed},
		{"committed", repl.ProtocolV3, transport.VersionCommitted},
		{"durable commit", repl.ProtocolV4, transport.VersionDurableCommit},
	} {
		if v.repl != v.env {
			t.Errorf("%s: repl speaks it as %d, the transport lays it out as %d", v.name, v.repl, v.env)
		}
	}
	if s := repl.Supported(); s.Min != transport.VersionBase || s.Max < transport.VersionDurableCommit {
		t.Errorf("this build speaks %v; the transport lays out %d..%d", s, transport.VersionBase, transport.VersionDurableCommit)
	}
}
