package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Op is one kind of request.
type Op string

// The operation kinds. Each measured request is one round trip.
const (
	// Put writes a random key of a 100,000-key space (etcd's benchmark
	// tool's default).
	Put Op = "put"
	// RangeL is a linearizable Get of one key of the prefilled key space.
	RangeL Op = "range-l"
	// RangeS is the same Get, serializable.
	RangeS Op = "range-s"
	// Delete deletes a key the same client has just put. The put is not
	// timed, but it takes wall time, so Delete's throughput (deletes per
	// second) is about half what deletes alone would reach.
	Delete Op = "delete"
	// Txn is Kubernetes' optimistic update: If(ModRevision(k) == last seen)
	// Then(Put k) Else(Get k), on 25 hot keys shared by all clients. A
	// failed compare is a conflict: it counts as a completed request and the
	// client learns the new ModRevision from the Else branch.
	Txn Op = "txn"
	// LeaseGrant grants a 60 s lease (not revoked: kine cannot).
	LeaseGrant Op = "lease-grant"
	// LeaseKeepAlive renews the client's own lease over one long-lived
	// LeaseKeepAlive stream, one request and its response per round trip.
	LeaseKeepAlive Op = "lease-keepalive"
)

// AllOps is every kind, in the order a bench runs them. Lease kinds come
// last: leases granted by a run expire later and would disturb runs after it.
var AllOps = []Op{Put, RangeL, RangeS, Delete, Txn, LeaseGrant, LeaseKeepAlive}

// ParseOps parses a comma-separated list of kinds ("all" for AllOps).
func ParseOps(s string) ([]Op, error) {
	if s == "" || s == "all" {
		return AllOps, nil
	}
	var ops []Op
	for _, f := range SplitList(s) {
		op := Op(f)
		found := isK8s(op)
		for _, k := range AllOps {
			found = found || k == op
		}
		if !found {
			return nil, fmt.Errorf("unknown operation %q", op)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// Key-space sizes.
const (
	putKeys   = 100000
	rangeKeys = 1000 // prefilled before range runs
	hotKeys   = 25   // the txn's shared keys (Kubernetes' hot objects)
	leaseTTL  = 60
)

// client is one simulated client's state. Only its own goroutine uses it.
type client struct {
	id     int
	cli    *clientv3.Client
	rng    *rand.Rand
	prefix string
	value  []byte // ValueSize printable bytes, refreshed per put
	seq    int
	revs   map[string]int64 // txn: last ModRevision seen per hot key
	lease  clientv3.LeaseID
	ka     pb.Lease_LeaseKeepAliveClient
	kaStop context.CancelFunc
	confl  int64
	shape  Op
	k8s    *k8sState // Kubernetes-shaped kinds (k8s.go)
}

const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

func (c *client) nextValue() string {
	for i := range c.value {
		c.value[i] = letters[c.rng.IntN(len(letters))]
	}
	return string(c.value)
}

func key(prefix string, op Op, n int) string { return fmt.Sprintf("%s%s/k%08d", prefix, op, n) }

// setup prepares the client's per-op state (unmeasured).
func (c *client) setup(ctx context.Context) error {
	if isK8s(c.shape) {
		return c.k8sSetup(ctx)
	}
	switch c.shape {
	case Txn:
		c.revs = make(map[string]int64, hotKeys)
		for i := range hotKeys {
			k := key(c.prefix, Txn, i)
			r, err := c.cli.Get(ctx, k)
			if err != nil {
				return err
			}
			if len(r.Kvs) > 0 {
				c.revs[k] = r.Kvs[0].ModRevision
			}
		}
	case LeaseKeepAlive:
		g, err := c.cli.Grant(ctx, leaseTTL)
		if err != nil {
			return err
		}
		c.lease = g.ID
		sctx, cancel := context.WithCancel(ctx)
		ka, err := pb.NewLeaseClient(c.cli.ActiveConnection()).LeaseKeepAlive(sctx)
		if err != nil {
			cancel()
			return err
		}
		c.ka, c.kaStop = ka, cancel
	}
	return nil
}

func (c *client) close() {
	if c.kaStop != nil {
		c.kaStop()
	}
	if c.k8s != nil {
		c.k8s.close()
	}
}

// pre runs the unmeasured part of a request (Delete's put).
func (c *client) pre(ctx context.Context) (string, error) {
	if c.shape != Delete {
		return "", nil
	}
	c.seq++
	k := fmt.Sprintf("%s%s/c%03d/n%09d", c.prefix, Delete, c.id, c.seq)
	_, err := c.cli.Put(ctx, k, c.nextValue())
	return k, err
}

// do sends one measured request. arg is what pre returned.
func (c *client) do(ctx context.Context, arg string) error {
	if isK8s(c.shape) {
		return c.k8sDo(ctx)
	}
	switch c.shape {
	case Put:
		_, err := c.cli.Put(ctx, key(c.prefix, Put, c.rng.IntN(putKeys)), c.nextValue())
		return err
	case RangeL:
		_, err := c.cli.Get(ctx, key(c.prefix, RangeL, c.rng.IntN(rangeKeys)))
		return err
	case RangeS:
		_, err := c.cli.Get(ctx, key(c.prefix, RangeL, c.rng.IntN(rangeKeys)), clientv3.WithSerializable())
		return err
	case Delete:
		_, err := c.cli.Delete(ctx, arg)
		return err
	case Txn:
		k := key(c.prefix, Txn, c.rng.IntN(hotKeys))
		r, err := c.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(k), "=", c.revs[k])).
			Then(clientv3.OpPut(k, c.nextValue())).
			Else(clientv3.OpGet(k)).Commit()
		if err != nil {
			return err
		}
		if r.Succeeded {
			c.revs[k] = r.Header.Revision
			return nil
		}
		c.confl++
		c.revs[k] = 0
		if rr := r.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
			c.revs[k] = rr.Kvs[0].ModRevision
		}
		return nil
	case LeaseGrant:
		_, err := c.cli.Grant(ctx, leaseTTL)
		return err
	case LeaseKeepAlive:
		if err := c.ka.Send(&pb.LeaseKeepAliveRequest{ID: int64(c.lease)}); err != nil {
			if errors.Is(err, io.EOF) {
				// gRPC: Send reports only that the stream ended; the
				// server's status comes from Recv.
				_, err = c.ka.Recv()
			}
			return err
		}
		r, err := c.ka.Recv()
		if err == nil && r.TTL <= 0 {
			err = fmt.Errorf("lease %x not found", c.lease)
		}
		return err
	}
	return fmt.Errorf("unknown op %q", c.shape)
}

// IsUnsupported reports whether err says the server does not implement the
// request: gRPC Unimplemented (etcd's and kine's "... is not implemented by
// kine"), or kine's plain errors ("lease keep alive is not supported").
func IsUnsupported(err error) bool {
	if err == nil {
		return false
	}
	if s, ok := status.FromError(err); ok && s.Code() == codes.Unimplemented {
		return true
	}
	var se interface{ GRPCStatus() *status.Status }
	msg := err.Error()
	if errors.As(err, &se) {
		msg = se.GRPCStatus().Message()
	}
	msg = strings.ToLower(msg)
	return strings.Contains(msg, "not supported") || strings.Contains(msg, "not implemented") || strings.Contains(msg, "unsupported")
}

// SplitList splits a comma-separated flag value, trimming spaces and
// dropping empty items (pflag's slice flags keep blanks).
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
