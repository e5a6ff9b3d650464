package server

import (
	"context"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
)

// Status answers Maintenance.Status.
func (s *Server) Status(ctx context.Context) *pb.StatusResponse {
	s.mu.Lock()
	idx := s.appliedIdx
	s.mu.Unlock()
	resp := &pb.StatusResponse{
		Header:           s.Header(s.store.ReadableRev()),
		Version:          EtcdVersion,
		DbSize:           s.be.Size(),
		DbSizeInUse:      s.be.SizeInUse(),
		Leader:           s.LeaderID(),
		RaftIndex:        idx,
		RaftTerm:         s.term.Load(),
		RaftAppliedIndex: idx,
		DbSizeQuota:      s.cfg.QuotaBackendBytes,
	}
	for _, a := range s.Alarms() {
		resp.Errors = append(resp.Errors, "memberID:"+formatID(a.MemberID)+" alarm:"+a.Alarm.String())
	}
	if s.repl != nil {
		if why := s.repl.stuckWhy.Load(); why != nil && *why != "" {
			resp.Errors = append(resp.Errors, "memberID:"+formatID(s.memberID)+" "+*why)
		}
	}
	return resp
}

func formatID(id uint64) string {
	const hex = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = hex[id&0xf]
		id >>= 4
	}
	i := 0
	for i < 15 && b[i] == '0' {
		i++
	}
	return string(b[i:])
}

// Alarm answers Maintenance.Alarm; activation and deactivation go through
// the log.
func (s *Server) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	if r.Action == pb.AlarmRequest_GET {
		resp := &pb.AlarmResponse{Header: s.Header(s.store.ReadableRev()), Alarms: s.Alarms()}
		return resp, nil
	}
	resp, err := s.propose(ctx, &pb.InternalRaftRequest{Alarm: r})
	if err != nil {
		return nil, err
	}
	out := resp.(*pb.AlarmResponse)
	s.FillHeader(out.Header)
	return out, nil
}

// HashKV answers Maintenance.HashKV.
func (s *Server) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	h, err := s.store.HashKV(r.Revision)
	if err != nil {
		return nil, toGRPC(err)
	}
	// hash_revision is the revision the hash covers (the one asked for,
	// or the current one for 0), as etcd 3.6 servers fill it. The field is
	// in the API since 3.5.13; 3.5 servers leave it 0 and 3.5 clients
	// ignore it, while 3.6 tooling (etcdctl, the corruption check) reads
	// it to know which revision two hashes compare.
	return &pb.HashKVResponse{Header: s.Header(s.store.ReadableRev()), Hash: h.Hash, CompactRevision: h.CompactRev, HashRevision: h.Rev}, nil
}

// Defragment rewrites the data file to reclaim free space.
func (s *Server) Defragment(ctx context.Context) (*pb.DefragmentResponse, error) {
	before := s.be.Size()
	if err := s.be.Defrag(); err != nil {
		return nil, err
	}
	s.refreshGauges()
	s.log.Info("defragmented", "size-before", before, "size-after", s.be.Size())
	return &pb.DefragmentResponse{Header: s.Header(s.store.ReadableRev())}, nil
}

// Snapshot writes an etcd-format snapshot (bbolt file + SHA-256) to w;
// onSize learns its total size first.
func (s *Server) Snapshot(w io.Writer, onSize func(int64)) (int64, error) {
	return s.be.Snapshot(w, onSize)
}
