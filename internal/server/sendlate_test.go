package server_test

import (
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
	"github.com/dyad-db/dyad/internal/transport"
)

// commitBeats records, for every heartbeat a primary sends, the commit
// index it carries and the primary's visible revision at the moment of
// the send. Sends run on the primary's apply loop, which is also the only
// goroutine that makes revisions visible, so the pair is exact.
type commitBeats struct {
	server.SendTap
	srv   *server.Server // set once the node is made; nil: not recording; guarded by the tap's lock
	beats []commitBeat
}

type commitBeat struct {
	commit  uint64
	visible int64
}

func newCommitBeats() *commitBeats {
	c := &commitBeats{}
	c.On = func(m *transport.Message) {
		if m.Kind != repl.KindHeartbeat || c.srv == nil {
			return
		}
		if hb, err := repl.DecodeHeartbeat(m.Payload); err == nil {
			visible, _, _ := c.srv.Store().Revs()
			c.beats = append(c.beats, commitBeat{commit: hb.Commit, visible: visible})
		}
	}
	return c
}

func (c *commitBeats) start(srv *server.Server) { c.Reset(func() { c.srv, c.beats = srv, nil }) }

// firstCovering returns the first recorded heartbeat whose commit index
// covers index.
func (c *commitBeats) firstCovering(index uint64) (commitBeat, bool) {
	var beats []commitBeat
	c.With(func() { beats = append(beats, c.beats...) })
	for _, b := range beats {
		if b.commit >= index {
			return b, true
		}
	}
	return commitBeat{}, false
}

// The heartbeat that tells the replica a new commit index goes out only
// after the primary released the batch it commits: by the time it is
// sent, the write is visible on the primary (and its caller answered), so
// the heartbeat's send is not on the write's path.
func TestCommitHeartbeatFollowsTheRelease(t *testing.T) {
	net := transport.NewMemNet()
	beats := newCommitBeats()
	a := pairNodeWith(t, net, t.TempDir(), 1, true, func(c *server.ReplConfig) {
		beats.Transport = c.Transport
		c.Transport = beats
	})
	b := pairNodeWith(t, net, t.TempDir(), 2, false, nil)
	waitRole(t, a, repl.RolePrimary)
	waitRole(t, b, repl.RoleReplica)
	beats.start(a.srv)
	put(t, a.cli, "k", "before")
	waitLease(t, b)

	for i := 0; i < 5; i++ {
		rev := put(t, a.cli, "k", "v")
		// One client on an idle pair: the write is the newest entry.
		idx := server.AppliedIndex(a.srv)
		deadline := time.Now().Add(20 * testLease)
		var first commitBeat
		for {
			var ok bool
			if first, ok = beats.firstCovering(idx); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("write %d: no heartbeat carried a commit index of %d or above", i, idx)
			}
			time.Sleep(time.Millisecond)
		}
		if first.visible < rev {
			t.Fatalf("write %d: the heartbeat with commit index %d was sent while revision %d was visible, before the write's revision %d was released",
				i, first.commit, first.visible, rev)
		}
	}
}
