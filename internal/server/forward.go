package server

import (
	"context"
	"encoding/binary"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/transport"
)

// forward sends a write to the primary and waits for the local result of
// the entry that carries it.
func (s *Server) forward(ctx context.Context, req *pb.InternalRaftRequest) (applyResult, error) {
	r := s.repl
	data, err := req.Marshal()
	if err != nil {
		return applyResult{}, err
	}
	id := r.nextReq.Add(1)
	p := &proposal{req: req, done: make(chan applyResult, 1)}
	s.mu.Lock()
	r.fwdWait[id] = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(r.fwdWait, id)
		s.mu.Unlock()
	}()
	if s.Role() != repl.RoleReplica {
		// The role changed as this was registered. If setRole did not
		// take it (to answer or adopt it), nothing was sent: go again.
		s.mu.Lock()
		_, ours := r.fwdWait[id]
		delete(r.fwdWait, id)
		s.mu.Unlock()
		if ours {
			return applyResult{err: errRedirect}, nil
		}
	} else {
		f := repl.Forward{Op: repl.ForwardWrite, ReqID: id, Data: data}
		if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindForward, Index: id, Payload: f.Encode()}); err != nil {
			return applyResult{}, rpctypes.ErrGRPCNoLeader // not sent: no effect
		}
	}
	wait := time.NewTimer(r.cfg.AckTimeout + 5*r.cfg.Lease)
	defer wait.Stop()
	select {
	case res := <-p.done:
		return res, nil
	case <-wait.C:
		return applyResult{}, rpctypes.ErrGRPCTimeout
	case <-ctx.Done():
		return applyResult{}, rpctypes.ErrGRPCTimeout
	case <-s.stopped:
		return applyResult{}, rpctypes.ErrGRPCTimeout
	}
}

// forwardKeepAlive renews a lease through the primary.
func (s *Server) forwardKeepAlive(ctx context.Context, id int64) (int64, error) {
	r := s.repl
	reqID := r.nextReq.Add(1)
	c := make(chan repl.Reply, 1)
	s.mu.Lock()
	r.kaWait[reqID] = c
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(r.kaWait, reqID)
		s.mu.Unlock()
	}()
	f := repl.Forward{Op: repl.ForwardKeepAlive, ReqID: reqID, Data: binary.BigEndian.AppendUint64(nil, uint64(id))}
	if err := r.tr.Send(&transport.Message{Class: transport.Control, Kind: repl.KindForward, Index: reqID, Payload: f.Encode()}); err != nil {
		return 0, rpctypes.ErrGRPCNoLeader
	}
	wait := time.NewTimer(5 * r.cfg.Lease)
	defer wait.Stop()
	select {
	case rp := <-c:
		switch rp.Err {
		case repl.ReplyOK:
			return rp.TTL, nil
		case repl.ReplyLeaseNotFound:
			return 0, rpctypes.ErrGRPCLeaseNotFound
		}
		return 0, rpctypes.ErrGRPCNoLeader
	case <-wait.C:
		return 0, rpctypes.ErrGRPCTimeout
	case <-ctx.Done():
		return 0, ctxErr(ctx)
	}
}

// dedup remembers the newest forwarded request IDs per origin.
type dedup struct {
	max  int
	seen map[[2]uint64]struct{}
	ring [][2]uint64
	next int
}

func newDedup(max int) *dedup { return &dedup{max: max, seen: map[[2]uint64]struct{}{}} }

// add reports false if (origin, id) was seen.
func (d *dedup) add(origin, id uint64) bool {
	k := [2]uint64{origin, id}
	if _, ok := d.seen[k]; ok {
		return false
	}
	if len(d.ring) < d.max {
		d.ring = append(d.ring, k)
	} else {
		delete(d.seen, d.ring[d.next])
		d.ring[d.next] = k
		d.next = (d.next + 1) % d.max
	}
	d.seen[k] = struct{}{}
	return true
}
