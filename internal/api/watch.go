package api

import (
	"context"
	"errors"
	"io"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"

	"github.com/dyad-db/dyad/internal/watch"
)

const (
	// watchStreamBufLen is the responses a stream buffers before its slow
	// watchers fall back to history (etcd's chanBufLen).
	watchStreamBufLen = 128
	// watchFragmentOverhead is what etcd's watch server adds to
	// --max-request-bytes before it fragments a response.
	watchFragmentOverhead = 512 * 1024
	// defaultMaxRequestBytes is etcd's --max-request-bytes default.
	defaultMaxRequestBytes = 1536 * 1024
)

type watchServer struct {
	hub             *watch.Hub
	fillHeader      func(*pb.ResponseHeader)
	maxRequestBytes int
}

// NewWatchServer serves etcd's Watch service from hub. fillHeader sets
// cluster_id, member_id and raft_term of every response header (it must not
// touch Revision). maxRequestBytes is the node's --max-request-bytes: as in
// etcd, a response of a watcher that asked for fragment is split once it
// reaches maxRequestBytes plus 512 KiB of gRPC overhead.
func NewWatchServer(hub *watch.Hub, fillHeader func(*pb.ResponseHeader), maxRequestBytes int) pb.WatchServer {
	if maxRequestBytes <= 0 {
		maxRequestBytes = defaultMaxRequestBytes
	}
	if fillHeader == nil {
		fillHeader = func(*pb.ResponseHeader) {}
	}
	return &watchServer{hub: hub, fillHeader: fillHeader, maxRequestBytes: maxRequestBytes + watchFragmentOverhead}
}

// Watch runs one stream: a receive goroutine turns requests into calls on
// the hub stream while this goroutine sends the hub stream's responses.
// Like etcd, the stream ends when the client goes away or a receive fails,
// not when the client closes its sending side. The send loop has stopped
// when Watch returns; so has the receive loop, unless the stream's context
// ended (it then ends with the gRPC stream, see below).
func (ws *watchServer) Watch(stream pb.Watch_WatchServer) error {
	ctx := stream.Context()
	hs := ws.hub.NewStream(watchStreamBufLen)
	recvDone := make(chan struct{})
	var recvErr error
	go func() {
		defer close(recvDone)
		recvErr = watchRecvLoop(stream, hs)
	}()

	err := ws.sendLoop(ctx, stream, hs, recvDone, &recvErr)
	// Closing the hub stream releases a receive loop blocked queueing a
	// control response. The send loop only returns when ctx is done or the
	// receive loop ended.
	hs.Close()
	select {
	case <-recvDone:
	case <-ctx.Done():
		// The receive loop may be blocked in the gRPC stream's Recv, which
		// fails only once this handler has returned and gRPC ends the
		// stream. ctx can be an interceptor's context that Recv does not
		// observe (the require-leader one cancels it when the primary is
		// lost): waiting here would hang the stream, and every watch on it,
		// for good. So the loop is left to end with the stream, right after
		// this returns, as etcd's watch server does.
	}
	return err
}

func (ws *watchServer) sendLoop(ctx context.Context, stream pb.Watch_WatchServer, hs *watch.Stream, recvDone <-chan struct{}, recvErr *error) error {
	done := recvDone
	for {
		select {
		case resp := <-hs.Responses():
			if err := ws.send(stream, resp); err != nil {
				// etcd stops sending but keeps the stream until the
				// client goes away; nothing more is queued meanwhile.
				hs.Close()
				for {
					select {
					case <-done:
						if *recvErr != nil {
							return watchStreamErr(*recvErr)
						}
						done = nil
					case <-ctx.Done():
						return watchStreamErr(ctx.Err())
					}
				}
			}
		case <-done:
			if *recvErr != nil {
				return watchStreamErr(*recvErr)
			}
			done = nil // client closed its side: keep sending
		case <-ctx.Done():
			return watchStreamErr(ctx.Err())
		}
	}
}

func watchStreamErr(err error) error {
	if errors.Is(err, context.Canceled) {
		return rpctypes.ErrGRPCWatchCanceled
	}
	return err
}

func watchRecvLoop(stream pb.Watch_WatchServer, hs *watch.Stream) error {
	for {
		req, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		switch uv := req.RequestUnion.(type) {
		case *pb.WatchRequest_CreateRequest:
			if uv.CreateRequest != nil {
				// The hub queues the Created (or failure) response.
				hs.Watch(uv.CreateRequest)
			}
		case *pb.WatchRequest_CancelRequest:
			if uv.CancelRequest != nil {
				// Unknown IDs are ignored, as in etcd.
				hs.Cancel(uv.CancelRequest.WatchId)
			}
		case *pb.WatchRequest_ProgressRequest:
			if uv.ProgressRequest != nil {
				hs.RequestProgress()
			}
		default:
			// etcd ignores requests it does not know.
		}
	}
}

func (ws *watchServer) send(stream pb.Watch_WatchServer, r *pb.WatchResponse) error {
	if r.Header == nil {
		r.Header = &pb.ResponseHeader{}
	}
	rev := r.Header.Revision
	ws.fillHeader(r.Header)
	r.Header.Revision = rev
	if !r.Fragment {
		return stream.Send(r)
	}
	// The hub marks responses of watchers that asked for fragmentation.
	r.Fragment = false
	return sendFragments(r, ws.maxRequestBytes, stream.Send)
}

// sendFragments sends wr whole when it is smaller than maxBytes or has one
// event; otherwise in pieces that each stay under maxBytes (or hold a
// single event), all but the last with Fragment set. This is etcd's rule,
// piece for piece.
func sendFragments(wr *pb.WatchResponse, maxBytes int, send func(*pb.WatchResponse) error) error {
	if wr.Size() < maxBytes || len(wr.Events) < 2 {
		return send(wr)
	}
	idx := 0
	for {
		// A new message per piece: gRPC may still hold the previous one.
		cur := &pb.WatchResponse{
			Header:          wr.Header,
			WatchId:         wr.WatchId,
			Created:         wr.Created,
			Canceled:        wr.Canceled,
			CompactRevision: wr.CompactRevision,
			CancelReason:    wr.CancelReason,
			Fragment:        true,
			Events:          make([]*mvccpb.Event, 0),
		}
		for _, ev := range wr.Events[idx:] {
			cur.Events = append(cur.Events, ev)
			if len(cur.Events) > 1 && cur.Size() >= maxBytes {
				cur.Events = cur.Events[:len(cur.Events)-1]
				break
			}
			idx++
		}
		if idx == len(wr.Events) {
			cur.Fragment = false
		}
		if err := send(cur); err != nil {
			return err
		}
		if !cur.Fragment {
			return nil
		}
	}
}
