package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"
)

// Kubernetes-shaped operation kinds. Their keys follow the apiserver's
// layout for a custom resource group, /registry/<group>/<resource>/<ns>/<name>,
// in a group of the bench's own (k8sGroup) so a real cluster's objects are
// never touched. Every request shape is one the apiserver's etcd3 store
// sends, so kine (which accepts only those shapes) can serve all of them.
const (
	// K8sMix is the apiserver's traffic mix, one kind drawn per request:
	// 84% reads (over half of them Gets of 25 hot objects, the rest Gets of
	// other objects and paginated LISTs) and 16% writes (GuaranteedUpdate
	// txns on objects and on node-lease-like hot keys, event creates with a
	// lease). Client 0 also keeps an informer watch open, started from the
	// revision of its initial LIST, as the apiserver's watch cache does.
	K8sMix Op = "k8s-mix"
	// K8sGet is a linearizable Get of one object, on a hot key 60% of the
	// time.
	K8sGet Op = "k8s-get"
	// K8sList is one page of a LIST: a prefix range over a namespace of
	// k8sObjects objects with limit k8sPage, linearizable.
	K8sList Op = "k8s-list"
	// K8sUpdate is GuaranteedUpdate: Txn If(ModRevision(k)==last seen)
	// Then(Put k) Else(Get k), on the namespace's objects.
	K8sUpdate Op = "k8s-update"
	// K8sCreate creates an event with a lease attached: Txn
	// If(ModRevision(k)==0) Then(Put k lease), each client with its own
	// lease, as the apiserver's lease manager reuses one lease for many
	// events.
	K8sCreate Op = "k8s-create"
	// K8sWatch is the delay of a watch: a client puts its own key and waits
	// until its own watch, opened from the revision of a LIST, delivers
	// the event.
	K8sWatch Op = "k8s-watch"
	// PhaseSteady is the study's steady state: K8sMix under another name,
	// so each phase has its own row.
	PhaseSteady Op = "phase-steady"
	// PhaseBurst is the study's burst of new pods: each client repeats
	// create pod, create its event with a lease, then two status updates
	// (scheduled, running) of that pod; one step per request.
	PhaseBurst Op = "phase-burst"
)

// Profiles name the operation lists `dyad bench --profile` selects.
var Profiles = map[string][]Op{
	"raw":    AllOps,
	"k8s":    {K8sMix, K8sGet, K8sList, K8sUpdate, K8sCreate, K8sWatch},
	"phases": {PhaseSteady, PhaseBurst},
}

// ProfileNames is the order profiles run in when "all" is asked for.
var ProfileNames = []string{"raw", "k8s", "phases"}

// ProfileOps returns the operations of a comma-separated profile list
// ("all": every profile).
func ProfileOps(s string) ([]Op, error) {
	var ops []Op
	for _, p := range SplitList(s) {
		if p == "all" {
			for _, n := range ProfileNames {
				ops = append(ops, Profiles[n]...)
			}
			continue
		}
		l, ok := Profiles[p]
		if !ok {
			return nil, fmt.Errorf("unknown profile %q (want raw, k8s, phases or all)", p)
		}
		ops = append(ops, l...)
	}
	return ops, nil
}

// k8sOps are the kinds this file implements.
var k8sOps = []Op{K8sMix, K8sGet, K8sList, K8sUpdate, K8sCreate, K8sWatch, PhaseSteady, PhaseBurst}

func isK8s(op Op) bool {
	for _, k := range k8sOps {
		if k == op {
			return true
		}
	}
	return false
}

// Shape of the Kubernetes key space.
const (
	k8sGroup     = "registry/bench.dyad.io/"
	k8sObjects   = 1000 // objects in the listed namespace, prefilled
	k8sPage      = 100  // LIST page size
	k8sHot       = 25   // hot objects (hotKeys)
	k8sEventTTL  = 3600 // the apiserver's event TTL
	k8sObjSize   = 1024 // bytes of a pod-shaped value
	k8sHotReadPc = 60   // percent of Gets on the hot objects
)

// k8sKey is a key of the bench's resource group: /registry/<group>/<prefix><rest>.
// The run's Prefix is kept (inside the group) so two benches can share a
// target.
func k8sKey(prefix, rest string) string { return "/" + k8sGroup + prefix + rest }

func k8sObj(prefix string, i int) string {
	return k8sKey(prefix, fmt.Sprintf("pods/default/pod-%05d", i))
}
func k8sHotKey(prefix string, i int) string {
	return k8sKey(prefix, fmt.Sprintf("leases/kube-node-lease/node-%02d", i))
}
func k8sNS(prefix string) string { return k8sKey(prefix, "pods/default/") }

// k8sState is one client's Kubernetes-shaped state (its goroutine only,
// except the informer, which owns its own counters).
type k8sState struct {
	revs  map[string]int64 // last ModRevision seen per object
	lease clientv3.LeaseID
	seq   int
	// burst: the pod being created and updated, and the step (0..3).
	pod  string
	step int
	// watch (K8sWatch): the client's own watch and key.
	wch  clientv3.WatchChan
	wkey string
	// stop ends the watch or informer; wg waits for the informer.
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// podValue is a pod-shaped text value: a JSON document padded to about
// k8sObjSize bytes with seeded printable text.
func podValue(rng *rand.Rand, name, phase string) string {
	b := make([]byte, k8sObjSize)
	for i := range b {
		b[i] = letters[rng.IntN(len(letters))]
	}
	return fmt.Sprintf(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":%q,"namespace":"default"},"status":{"phase":%q},"spec":{"pad":%q}}`,
		name, phase, b)
}

// k8sPrefill writes the namespace's objects and the hot keys unless they
// are all there already (a count-only range tells).
func k8sPrefill(ctx context.Context, cli *clientv3.Client, spec Spec) error {
	ns := k8sNS(spec.Prefix)
	if r, err := cli.Get(ctx, ns, clientv3.WithPrefix(), clientv3.WithCountOnly()); err == nil && r.Count >= k8sObjects {
		return nil
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 1))
	val := podValue(rng, "prefill", "Running")
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i := range k8sObjects + k8sHot {
		g.Go(func() error {
			k := k8sObj(spec.Prefix, i)
			if i >= k8sObjects {
				k = k8sHotKey(spec.Prefix, i-k8sObjects)
			}
			_, err := cli.Put(gctx, k, val)
			return err
		})
	}
	return g.Wait()
}

// k8sSetup prepares a client for a Kubernetes-shaped kind (unmeasured).
func (c *client) k8sSetup(ctx context.Context) error {
	s := &k8sState{revs: map[string]int64{}}
	c.k8s = s
	switch c.shape {
	case K8sCreate, PhaseBurst, K8sMix, PhaseSteady:
		g, err := c.cli.Grant(ctx, k8sEventTTL)
		if err != nil {
			return err
		}
		s.lease = g.ID
	}
	switch c.shape {
	case K8sWatch:
		// LIST, then watch from the next revision: the informer pattern.
		r, err := c.cli.Get(ctx, k8sNS(c.prefix), clientv3.WithPrefix(), clientv3.WithLimit(k8sPage))
		if err != nil {
			return err
		}
		s.wkey = k8sKey(c.prefix, fmt.Sprintf("configmaps/watch/c%03d", c.id))
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		s.stop = cancel
		s.wch = c.cli.Watch(wctx, s.wkey, clientv3.WithRev(r.Header.Revision+1))
	case K8sMix, PhaseSteady:
		if c.id != 0 {
			return nil
		}
		// Probe every request shape of the mix once, so an unsupported
		// one is reported before anything is measured.
		for _, kind := range []int{mixHotGet, mixGet, mixList, mixUpdate, mixHotUpdate, mixEvent} {
			if err := c.mixDo(ctx, kind); err != nil {
				return err
			}
		}
		// The informer: LIST, then watch the group from the next revision,
		// draining events until the run ends.
		r, err := c.cli.Get(ctx, k8sNS(c.prefix), clientv3.WithPrefix(), clientv3.WithLimit(k8sPage))
		if err != nil {
			return err
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		s.stop = cancel
		wch := c.cli.Watch(wctx, k8sKey(c.prefix, ""), clientv3.WithPrefix(), clientv3.WithRev(r.Header.Revision+1))
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for range wch { // ends when wctx is cancelled
			}
		}()
	}
	return nil
}

func (s *k8sState) close() {
	if s.stop != nil {
		s.stop()
	}
	s.wg.Wait()
}

// Request kinds of the mix.
const (
	mixHotGet = iota
	mixGet
	mixList
	mixUpdate
	mixHotUpdate
	mixEvent
)

// mixKind draws one request kind: 84% reads (50 hot Gets, 28 other Gets, 6
// LISTs), 16% writes (8 object updates, 4 hot-key updates, 4 events).
func mixKind(rng *rand.Rand) int {
	switch n := rng.IntN(100); {
	case n < 50:
		return mixHotGet
	case n < 78:
		return mixGet
	case n < 84:
		return mixList
	case n < 92:
		return mixUpdate
	case n < 96:
		return mixHotUpdate
	default:
		return mixEvent
	}
}

func (c *client) mixDo(ctx context.Context, kind int) error {
	switch kind {
	case mixHotGet:
		_, err := c.cli.Get(ctx, k8sHotKey(c.prefix, c.rng.IntN(k8sHot)))
		return err
	case mixGet:
		_, err := c.cli.Get(ctx, k8sObj(c.prefix, c.rng.IntN(k8sObjects)))
		return err
	case mixList:
		_, err := c.cli.Get(ctx, k8sNS(c.prefix), clientv3.WithPrefix(), clientv3.WithLimit(k8sPage))
		return err
	case mixUpdate:
		return c.guaranteedUpdate(ctx, k8sObj(c.prefix, c.rng.IntN(k8sObjects)), "Running")
	case mixHotUpdate:
		return c.guaranteedUpdate(ctx, k8sHotKey(c.prefix, c.rng.IntN(k8sHot)), "Running")
	default:
		return c.createEvent(ctx)
	}
}

// guaranteedUpdate is the apiserver's optimistic update; a failed compare
// is a conflict, and the Else branch's read gives the revision to retry
// with (the retry is the client's next request).
func (c *client) guaranteedUpdate(ctx context.Context, k, phase string) error {
	r, err := c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(k), "=", c.k8s.revs[k])).
		Then(clientv3.OpPut(k, podValue(c.rng, k, phase))).
		Else(clientv3.OpGet(k)).Commit()
	if err != nil {
		return err
	}
	if r.Succeeded {
		c.k8s.revs[k] = r.Header.Revision
		return nil
	}
	c.confl++
	c.k8s.revs[k] = 0
	if rr := r.Responses[0].GetResponseRange(); rr != nil && len(rr.Kvs) > 0 {
		c.k8s.revs[k] = rr.Kvs[0].ModRevision
	}
	return nil
}

// create is the apiserver's Create: Txn If(ModRevision(k)==0) Then(Put).
// An existing key is a conflict (AlreadyExists), not an error.
func (c *client) create(ctx context.Context, k, v string, opts ...clientv3.OpOption) error {
	r, err := c.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, v, opts...)).Commit()
	if err != nil {
		return err
	}
	if !r.Succeeded {
		c.confl++
	} else {
		c.k8s.revs[k] = r.Header.Revision
	}
	return nil
}

func (c *client) createEvent(ctx context.Context) error {
	c.k8s.seq++
	k := k8sKey(c.prefix, fmt.Sprintf("events/default/c%03d.%08d", c.id, c.k8s.seq))
	v := fmt.Sprintf(`{"kind":"Event","reason":"Scheduled","message":%q}`, c.nextValue())
	return c.create(ctx, k, v, clientv3.WithLease(c.k8s.lease))
}

// k8sDo sends one measured Kubernetes-shaped request.
func (c *client) k8sDo(ctx context.Context) error {
	s := c.k8s
	switch c.shape {
	case K8sMix, PhaseSteady:
		return c.mixDo(ctx, mixKind(c.rng))
	case K8sGet:
		if c.rng.IntN(100) < k8sHotReadPc {
			return c.mixDo(ctx, mixHotGet)
		}
		return c.mixDo(ctx, mixGet)
	case K8sList:
		return c.mixDo(ctx, mixList)
	case K8sUpdate:
		return c.mixDo(ctx, mixUpdate)
	case K8sCreate:
		return c.createEvent(ctx)
	case K8sWatch:
		if _, err := c.cli.Put(ctx, s.wkey, c.nextValue()); err != nil {
			return err
		}
		for {
			select {
			case wr, ok := <-s.wch:
				if !ok {
					return fmt.Errorf("watch on %s closed", s.wkey)
				}
				if err := wr.Err(); err != nil {
					return err
				}
				if len(wr.Events) > 0 { // else a progress notification
					return nil
				}
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	case PhaseBurst:
		switch s.step {
		case 0:
			s.seq++
			s.pod = k8sKey(c.prefix, fmt.Sprintf("pods/burst/c%03d-%07d", c.id, s.seq))
			if err := c.create(ctx, s.pod, podValue(c.rng, s.pod, "Pending")); err != nil {
				return err
			}
		case 1:
			if err := c.createEvent(ctx); err != nil {
				return err
			}
		case 2:
			if err := c.guaranteedUpdate(ctx, s.pod, "Scheduled"); err != nil {
				return err
			}
		default:
			if err := c.guaranteedUpdate(ctx, s.pod, "Running"); err != nil {
				return err
			}
		}
		s.step = (s.step + 1) % 4
		return nil
	}
	return fmt.Errorf("unknown op %q", c.shape)
}
