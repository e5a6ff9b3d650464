package sim

import "github.com/dyad-db/dyad/internal/repl"

// The read grant (repl.ReadGrant), carried out as the server does
// (internal/server, reads.go): the grant in force is narrowed before a
// Ready's effects and widened after them, and a read whose clock reading
// it covers is served at once, without ReadIndex.

// narrowGrant publishes g before the effects of its Ready if it covers
// less than the grant in force.
func (n *node) narrowGrant(g repl.ReadGrant) {
	if g.Narrows(n.grant) {
		n.grant = g
	}
}

// widenGrant publishes g once its Ready is carried out (unless the node
// went down meanwhile: a crash withdraws its grant).
func (n *node) widenGrant(g repl.ReadGrant) {
	if n.n != nil {
		n.grant = g
	}
}

// readUnderGrant serves read op under the grant in force (the caller
// checked that it covers the node's clock now), at its index at least.
func (n *node) readUnderGrant(op *Op) {
	n.ready = append(n.ready, released{op: op, index: n.grant.Index})
	n.serveReads()
}
