package api

import (
	"context"
	"errors"
	"io"
	"sync"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dyad-db/dyad/internal/server"
)

// snapshotChunk is the blob size of one Snapshot message (etcd's 32 KiB).
const snapshotChunk = 32 * 1024

type maintenanceServer struct {
	s *server.Server
}

func (m *maintenanceServer) Alarm(ctx context.Context, r *pb.AlarmRequest) (*pb.AlarmResponse, error) {
	return m.s.Alarm(ctx, r)
}

func (m *maintenanceServer) Status(ctx context.Context, r *pb.StatusRequest) (*pb.StatusResponse, error) {
	return m.s.Status(ctx), nil
}

func (m *maintenanceServer) Defragment(ctx context.Context, r *pb.DefragmentRequest) (*pb.DefragmentResponse, error) {
	return m.s.Defragment(ctx)
}

// Hash is etcd's whole-keyspace hash, meant for tests; dyad answers with the
// MVCC hash at the newest revision, which is the part that matters.
func (m *maintenanceServer) Hash(ctx context.Context, r *pb.HashRequest) (*pb.HashResponse, error) {
	resp, err := m.s.HashKV(ctx, &pb.HashKVRequest{})
	if err != nil {
		return nil, err
	}
	return &pb.HashResponse{Header: resp.Header, Hash: resp.Hash}, nil
}

func (m *maintenanceServer) HashKV(ctx context.Context, r *pb.HashKVRequest) (*pb.HashKVResponse, error) {
	return m.s.HashKV(ctx, r)
}

// Snapshot streams an etcd-format snapshot. The writer goroutine is owned by
// this handler: closing the pipe on return makes it stop, and the handler
// waits for it.
func (m *maintenanceServer) Snapshot(r *pb.SnapshotRequest, stream pb.Maintenance_SnapshotServer) error {
	pr, pw := io.Pipe()
	sizec := make(chan int64, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, err := m.s.Snapshot(pw, func(n int64) { sizec <- n })
		pw.CloseWithError(err)
	}()
	defer wg.Wait()
	defer pr.Close()
	var total int64
	select {
	case total = <-sizec:
	case <-stream.Context().Done():
		return stream.Context().Err()
	}
	header := m.s.Header(m.s.Store().ReadableRev())
	buf := make([]byte, snapshotChunk)
	sent := int64(0)
	first := true
	for {
		n, err := io.ReadFull(pr, buf)
		if n > 0 {
			sent += int64(n)
			resp := &pb.SnapshotResponse{RemainingBytes: uint64(total - sent), Blob: buf[:n]}
			if first {
				resp.Header = header
				resp.Version = server.EtcdVersion
				first = false
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return status.Error(codes.Internal, "dyad: snapshot: "+err.Error())
		}
	}
}

// MoveLeader hands the primary role to the peer (etcdctl move-leader).
func (m *maintenanceServer) MoveLeader(ctx context.Context, r *pb.MoveLeaderRequest) (*pb.MoveLeaderResponse, error) {
	if err := m.s.MoveLeader(ctx, r.TargetID); err != nil {
		return nil, err
	}
	return &pb.MoveLeaderResponse{Header: m.s.Header(m.s.Store().ReadableRev())}, nil
}

func (m *maintenanceServer) Downgrade(ctx context.Context, r *pb.DowngradeRequest) (*pb.DowngradeResponse, error) {
	return nil, rpctypes.ErrGRPCClusterVersionUnavailable
}
