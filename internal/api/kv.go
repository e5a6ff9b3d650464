package api

import (
	"context"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/server"
)

type kvServer struct {
	s    *server.Server
	opts Options
}

func (k *kvServer) Range(ctx context.Context, r *pb.RangeRequest) (*pb.RangeResponse, error) {
	if err := checkRange(r); err != nil {
		return nil, err
	}
	return k.s.Range(ctx, r)
}

func (k *kvServer) Put(ctx context.Context, r *pb.PutRequest) (*pb.PutResponse, error) {
	if err := checkPut(r); err != nil {
		return nil, err
	}
	if r.Size() > k.opts.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	return k.s.Put(ctx, r)
}

func (k *kvServer) DeleteRange(ctx context.Context, r *pb.DeleteRangeRequest) (*pb.DeleteRangeResponse, error) {
	if err := checkDelete(r); err != nil {
		return nil, err
	}
	if r.Size() > k.opts.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	return k.s.DeleteRange(ctx, r)
}

func (k *kvServer) Txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if err := checkTxn(r, k.opts.MaxTxnOps); err != nil {
		return nil, err
	}
	if r.Size() > k.opts.MaxRequestBytes {
		return nil, rpctypes.ErrGRPCRequestTooLarge
	}
	return k.s.Txn(ctx, r)
}

func (k *kvServer) Compact(ctx context.Context, r *pb.CompactionRequest) (*pb.CompactionResponse, error) {
	return k.s.Compact(ctx, r)
}
