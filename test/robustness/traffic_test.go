package robustness

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/linearize"
)

// Key space of the recorded traffic. Every recorded write goes under
// keyPrefix and the ranges cover it whole; nothing else writes while a
// history is recorded (the model checks the global revision).
const (
	keyPrefix = "/rb/"
	nKeys     = 6
	leaseTTL  = 3600 // seconds: no lease expires during a run
)

func keys() []string {
	k := make([]string, nKeys)
	for i := range k {
		k[i] = fmt.Sprintf("%sk%d", keyPrefix, i)
	}
	return k
}

// opKind is one kind of client operation of a traffic profile.
type opKind int

const (
	opGet opKind = iota
	opRange
	opPut
	opUpdate // CAS with the mod_revision last seen (apiserver GuaranteedUpdate)
	opCreate // CAS with mod_revision 0 (apiserver Create)
	opDelete
	opPutLease // a put attached to the client's lease (apiserver events)
	opRevoke
	opKeepAlive // unrecorded: changes no key and no revision
)

// profile is a traffic mix: weights per operation kind.
type profile struct {
	name    string
	weights map[opKind]int
}

var (
	// kubernetes is shaped like an apiserver's traffic: mostly optimistic
	// updates, gets and lists, creates, some deletes, events under leases.
	kubernetes = profile{name: "kubernetes", weights: map[opKind]int{
		opGet: 20, opRange: 15, opUpdate: 30, opCreate: 10, opDelete: 8, opPutLease: 10, opRevoke: 2, opKeepAlive: 5}}
	// mixed spreads evenly over every operation.
	mixed = profile{name: "mixed", weights: map[opKind]int{
		opGet: 15, opRange: 10, opPut: 20, opUpdate: 15, opCreate: 5, opDelete: 10, opPutLease: 12, opRevoke: 8, opKeepAlive: 5}}
)

func (p profile) pick(rng *rand.Rand) opKind {
	total := 0
	for _, w := range p.weights {
		total += w
	}
	n := rng.IntN(total)
	for k := opGet; k <= opKeepAlive; k++ {
		if n < p.weights[k] {
			return k
		}
		n -= p.weights[k]
	}
	return opGet
}

// traffic runs logical clients spread over the given connections (client i
// uses clis[i%len(clis)], so both nodes serve reads and writes) until ctx is
// done, recording every operation into rec.
type traffic struct {
	profile   profile
	clis      []*clientv3.Client
	clients   int
	opTimeout time.Duration
	seed      uint64
}

func (tr traffic) run(ctx context.Context, rec *linearize.Recorder) {
	var wg sync.WaitGroup
	for i := 0; i < tr.clients; i++ {
		cli := tr.clis[i%len(tr.clis)]
		rng := rand.New(rand.NewPCG(tr.seed, uint64(i)))
		wg.Go(func() { tr.client(ctx, rec, cli, i, rng) })
	}
	wg.Wait()
}

func (tr traffic) client(ctx context.Context, rec *linearize.Recorder, cli *clientv3.Client, id int, rng *rand.Rand) {
	ks := keys()
	seen := map[string]int64{} // key -> mod_revision last observed (0: absent)
	var lease clientv3.LeaseID
	for seq := 0; ctx.Err() == nil; seq++ {
		key := ks[rng.IntN(len(ks))]
		val := fmt.Sprintf("c%d-%d", id, seq)
		kind := tr.profile.pick(rng)
		// Operations in flight when ctx ends still run to their own
		// timeout: cancelling them would only add unknown outcomes.
		octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tr.opTimeout)
		var out linearize.Output
		var err error
		switch kind {
		case opGet:
			out, err = rec.Get(octx, cli, id, key)
			if err == nil {
				seen[key] = out.KV.ModRev
			}
		case opRange:
			out, err = rec.Range(octx, cli, id, keyPrefix)
			if err == nil {
				clear(seen)
				for i, k := range out.Keys {
					seen[k] = out.KVs[i].ModRev
				}
			}
		case opPut:
			out, err = rec.Put(octx, cli, id, key, val)
			if err == nil {
				seen[key] = out.Rev
			}
		case opUpdate, opCreate:
			mod := seen[key]
			if kind == opCreate {
				mod = 0
			}
			out, err = rec.CAS(octx, cli, id, key, mod, val)
			if err == nil {
				if out.Succeeded {
					seen[key] = out.Rev
				} else {
					seen[key] = out.KV.ModRev
				}
			}
		case opDelete:
			_, err = rec.Delete(octx, cli, id, key)
			if err == nil {
				seen[key] = 0
			}
		case opPutLease:
			if lease == 0 {
				// A grant changes no key and no revision: not recorded.
				g, gerr := cli.Grant(octx, leaseTTL)
				if err = gerr; err == nil {
					lease = g.ID
				}
			}
			if lease != 0 {
				out, err = rec.PutLease(octx, cli, id, key, val, lease)
				if err == nil {
					seen[key] = out.Rev
				}
			}
		case opRevoke:
			if lease != 0 {
				_, err = rec.Revoke(octx, cli, id, lease)
				lease = 0 // revoked, gone, or unknown: grant a new one next time
				clear(seen)
			}
		case opKeepAlive:
			if lease != 0 {
				_, err = cli.KeepAliveOnce(octx, lease)
			}
		}
		cancel()
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
}
