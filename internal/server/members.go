package server

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"time"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// announcePeriod is how often a node of a pair tells its peer its member
// record. A lost or early announcement (before DDS matched the peer) is
// made good by the next one; the record is about a hundred bytes.
const announcePeriod = 2 * time.Second

// Member is one member as MemberList shows it.
type Member struct {
	ID         uint64   `json:"id"`
	Name       string   `json:"name"`
	PeerURLs   []string `json:"peerURLs"`
	ClientURLs []string `json:"clientURLs"`
}

// peerMembers holds what this node knows of its peer's member record. The
// configuration gives the peer's ID, name and peer URL; its client URLs
// are only known from the peer's own announcements, since each node
// advertises its own.
type peerMembers struct {
	mu    sync.Mutex
	heard *Member // the peer's newest announcement (nil: none yet in this run)
}

// Members lists the members as etcd's MemberList does: this node first,
// then its peer. A peer that has not announced itself since this node
// started is listed as etcd lists a member that has not published its
// attributes: with its ID and peer URLs, no name and no client URLs
// (etcdctl shows it "unstarted"). Once heard, its last announcement stays
// listed while it is down, as etcd keeps a dead member's attributes.
func (s *Server) Members() []Member {
	self := Member{ID: s.memberID, Name: s.cfg.Name, PeerURLs: slices.Clone(s.cfg.PeerURLs), ClientURLs: slices.Clone(s.cfg.ClientURLs)}
	out := []Member{self}
	if s.repl == nil {
		return out
	}
	s.peerMembers.mu.Lock()
	heard := s.peerMembers.heard
	s.peerMembers.mu.Unlock()
	switch {
	case heard != nil:
		out = append(out, *heard)
	case s.cfg.Peer != nil:
		out = append(out, Member{ID: s.cfg.Peer.ID, PeerURLs: slices.Clone(s.cfg.Peer.PeerURLs)})
	}
	return out
}

// announceLoop tells the peer this node's member record now and then every
// announcePeriod, until ctx is done.
func (s *Server) announceLoop(ctx context.Context) error {
	rec, err := json.Marshal(Member{ID: s.memberID, Name: s.cfg.Name, PeerURLs: s.cfg.PeerURLs, ClientURLs: s.cfg.ClientURLs})
	if err != nil {
		return err
	}
	send := func() {
		err := s.repl.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindMember, Payload: rec})
		if err != nil {
			s.log.Debug("member record not sent", "err", err)
		}
	}
	send()
	every(ctx, announcePeriod, send)
	return nil
}

// onPeerMember records the peer's announcement. It runs on the
// transport's delivery path, not in the apply loop: the record changes no
// replication state. A record whose ID is not the sender's, or that names
// this node, is ignored.
func (s *Server) onPeerMember(m *transport.Message) {
	var rec Member
	if err := json.Unmarshal(m.Payload, &rec); err != nil || rec.ID != m.From || rec.ID == s.memberID || rec.ID == 0 {
		return
	}
	s.peerMembers.mu.Lock()
	s.peerMembers.heard = &rec
	s.peerMembers.mu.Unlock()
}
