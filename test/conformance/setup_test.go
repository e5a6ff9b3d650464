package conformance

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/kubernetes"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/grpclog"

	"k8s.io/apimachinery/pkg/api/apitesting"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/apis/example"
	examplev1 "k8s.io/apiserver/pkg/apis/example/v1"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	"k8s.io/apiserver/pkg/storage/value"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/utils/clock"

	"github.com/dyad-db/dyad/test/testutil"
)

// EnvTarget selects the server under test: "dyad" (default) or an etcd
// binary name understood by testutil.ResolveBinary ("etcd-3.6", "etcd-3.4").
const EnvTarget = "DYAD_CONFORMANCE_TARGET"

// Values taken from k8s.io/apiserver/pkg/storage/etcd3/store_test.go.
const (
	defaultTestPrefix = "test!"
	// maxLimit mirrors etcd3's unexported maxLimit (store.go), used to
	// predict how many Range calls a paginated list makes.
	maxLimit = 10000
)

// scheme and codecs are read-only after init, as in the upstream test.
var (
	scheme = runtime.NewScheme()
	codecs = serializer.NewCodecFactory(scheme)
)

func init() {
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	utilruntime.Must(example.AddToScheme(scheme))
	utilruntime.Must(examplev1.AddToScheme(scheme))
	grpclog.SetLoggerV2(grpclog.NewLoggerV2(io.Discard, io.Discard, os.Stderr))
}

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// swapTransformer is the store's transformer. It delegates to a replaceable
// inner transformer, which stands in for the upstream test's assignments to
// the store's (unexported) transformer fields. The base is the
// PrefixTransformer the store was created with.
type swapTransformer struct {
	base *storagetesting.PrefixTransformer

	mu      sync.RWMutex
	current value.Transformer
}

func newSwapTransformer() *swapTransformer {
	base := storagetesting.NewPrefixTransformer([]byte(defaultTestPrefix), false)
	return &swapTransformer{base: base, current: base}
}

func (s *swapTransformer) get() value.Transformer {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.current
}

func (s *swapTransformer) set(t value.Transformer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.current = t
}

func (s *swapTransformer) TransformFromStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, bool, error) {
	return s.get().TransformFromStorage(ctx, data, dataCtx)
}

func (s *swapTransformer) TransformToStorage(ctx context.Context, data []byte, dataCtx value.Context) ([]byte, error) {
	return s.get().TransformToStorage(ctx, data, dataCtx)
}

// testStore is the etcd3 store plus the hooks the suite's extended
// interfaces need (InterfaceWithPrefixTransformer,
// InterfaceWithCorruptTransformer).
type testStore struct {
	storage.Interface
	transformer *swapTransformer
}

// UpdatePrefixTransformer implements storagetesting.InterfaceWithPrefixTransformer
// exactly as the upstream storeWithPrefixTransformer does: the modifier gets
// a copy of the base PrefixTransformer.
func (s *testStore) UpdatePrefixTransformer(modifier storagetesting.PrefixTransformerModifier) func() {
	orig := s.transformer.get()
	copied := *s.transformer.base
	s.transformer.set(modifier(&copied))
	return func() { s.transformer.set(orig) }
}

// CorruptTransformer implements storagetesting.InterfaceWithCorruptTransformer:
// every read fails to transform. The store was built with
// etcd3.WithCorruptObjErrorHandlingTransformer around the swap, so the error
// is classified as a corrupt object, as the upstream corruptedTransformer's is.
func (s *testStore) CorruptTransformer() func() {
	orig := s.transformer.get()
	s.transformer.set(corruptedTransformer{Transformer: orig})
	return func() { s.transformer.set(orig) }
}

type corruptedTransformer struct{ value.Transformer }

func (corruptedTransformer) TransformFromStorage(context.Context, []byte, value.Context) ([]byte, bool, error) {
	return nil, true, errBitsFlipped
}

type constErr string

func (e constErr) Error() string { return string(e) }

const errBitsFlipped = constErr("bits flipped")

type setupOptions struct {
	serverOpts     []testutil.Option
	prefix         string
	resourcePrefix string
	leaseConfig    etcd3.LeaseManagerConfig
}

type setupOption func(*setupOptions)

// withProgressNotify starts the server with a 1 s watch progress
// notification period, as upstream does with WatchProgressNotifyInterval.
func withProgressNotify() setupOption {
	return func(o *setupOptions) {
		o.serverOpts = append(o.serverOpts, testutil.WithProgressNotifyInterval(time.Second))
	}
}

// env is one test's server, client and store.
type env struct {
	ctx       context.Context
	server    *testutil.Server
	client    *kubernetes.Client
	store     *testStore
	codec     runtime.Codec
	versioner storage.Versioner
}

// raw is the unwrapped clientv3 client (its KV is the recorder).
func (e *env) raw() *clientv3.Client { return e.client.Client }

func setup(t *testing.T, opts ...setupOption) *env {
	t.Helper()
	o := setupOptions{
		prefix:         "",
		resourcePrefix: "/pods/",
		leaseConfig:    etcd3.NewDefaultLeaseManagerConfig(),
	}
	// As upstream: reuse leases for 1 s only, so TTL tests stay short.
	o.leaseConfig.ReuseDurationSeconds = 1
	for _, opt := range opts {
		opt(&o)
	}

	srv := testutil.Start(t, testutil.TargetFromEnv(EnvTarget), o.serverOpts...)

	client, err := kubernetes.New(clientv3.Config{
		Endpoints:   []string{srv.Endpoint()},
		DialTimeout: 10 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("kubernetes.New: %v", err)
	}
	t.Cleanup(func() { client.Close() })
	client.KV = storagetesting.NewKVRecorder(client.KV)
	client.Kubernetes = storagetesting.NewKubernetesRecorder(client.Kubernetes)

	codec := apitesting.TestCodec(codecs, examplev1.SchemeGroupVersion)
	versioner := storage.APIObjectVersioner{}
	compactor := etcd3.NewCompactor(client.Client, 0, clock.RealClock{}, nil)
	t.Cleanup(compactor.Stop)

	swap := newSwapTransformer()
	var transformer value.Transformer = swap
	decoder := etcd3.NewDefaultDecoder(codec, versioner)
	if utilfeature.DefaultFeatureGate.Enabled(features.AllowUnsafeMalformedObjectDeletion) {
		// What storagebackend/factory does in production when the gate is on.
		transformer = etcd3.WithCorruptObjErrorHandlingTransformer(transformer)
		decoder = etcd3.WithCorruptObjErrorHandlingDecoder(decoder)
	}
	s, err := etcd3.New(
		client,
		compactor,
		codec,
		func() runtime.Object { return &example.Pod{} },
		func() runtime.Object { return &example.PodList{} },
		o.prefix,
		o.resourcePrefix,
		schema.GroupResource{Resource: "pods"},
		transformer,
		o.leaseConfig,
		decoder,
		versioner,
	)
	if err != nil {
		t.Fatalf("etcd3.New: %v", err)
	}
	t.Cleanup(s.Close)
	return &env{
		ctx:       context.Background(),
		server:    srv,
		client:    client,
		store:     &testStore{Interface: s, transformer: swap},
		codec:     codec,
		versioner: versioner,
	}
}

// checkStorageInvariants is upstream's: what is stored has the transformer
// prefix, decodes, and carries neither resourceVersion nor selfLink.
func (e *env) checkStorageInvariants() storagetesting.KeyValidation {
	return func(ctx context.Context, t *testing.T, key string) {
		getResp, err := e.raw().KV.Get(ctx, key)
		if err != nil {
			t.Fatalf("etcdClient.KV.Get failed: %v", err)
		}
		if len(getResp.Kvs) == 0 {
			t.Fatalf("expecting non empty result on key: %s", key)
		}
		decoded, err := runtime.Decode(e.codec, getResp.Kvs[0].Value[len(defaultTestPrefix):])
		if err != nil {
			t.Fatalf("expecting successful decode of object from %v\n%v", err, string(getResp.Kvs[0].Value))
		}
		obj := decoded.(*example.Pod)
		if obj.ResourceVersion != "" {
			t.Errorf("stored object should have empty resource version")
		}
		if obj.SelfLink != "" {
			t.Errorf("stored output should have empty selfLink")
		}
	}
}

// checkStorageCallsInvariants is upstream's: counts transformer reads and
// Range calls to check that paginated lists grow their page size.
func (e *env) checkStorageCallsInvariants() storagetesting.CallsValidation {
	transformer := e.store.transformer.base
	recorder := e.client.KV.(*storagetesting.KVRecorder)
	return func(t *testing.T, pageSize, estimatedProcessedObjects uint64) {
		if reads := transformer.GetReadsAndReset(); reads != estimatedProcessedObjects {
			t.Errorf("unexpected reads: %d, expected: %d", reads, estimatedProcessedObjects)
		}
		estimatedGetCalls := uint64(1)
		if pageSize != 0 {
			currLimit := pageSize
			for sum := uint64(1); sum < estimatedProcessedObjects; {
				currLimit *= 2
				if currLimit > maxLimit {
					currLimit = maxLimit
				}
				sum += currLimit
				estimatedGetCalls++
			}
		}
		if reads := recorder.GetReadsAndReset(); reads != estimatedGetCalls {
			t.Fatalf("unexpected reads: %d, want: %d", reads, estimatedGetCalls)
		}
	}
}

// compactStorage compacts through etcd3.Compact (the apiserver's own
// compaction transaction) and, with ListFromCacheSnapshot, waits until the
// store's compactor has observed it.
func (e *env) compactStorage() storagetesting.Compaction {
	type compactRevisioner interface{ CompactRevision() int64 }
	return func(ctx context.Context, t *testing.T, resourceVersion string) {
		rv, err := e.versioner.ParseResourceVersion(resourceVersion)
		if err != nil {
			t.Fatal(err)
		}
		var currentVersion int64
		currentVersion, _, _, err = etcd3.Compact(ctx, e.raw(), currentVersion, int64(rv))
		if err != nil {
			_, _, _, err = etcd3.Compact(ctx, e.raw(), currentVersion, int64(rv))
		}
		if err != nil {
			t.Fatal(err)
		}
		if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
			cr, ok := e.store.Interface.(compactRevisioner)
			if !ok {
				t.Fatalf("store %T has no CompactRevision", e.store.Interface)
			}
			for cr.CompactRevision() != int64(rv) {
				select {
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
}

// increaseRV writes an unrelated key and returns the new revision.
func (e *env) increaseRV() storagetesting.IncreaseRVFunc {
	return func(ctx context.Context, t *testing.T) int64 {
		resp, err := e.raw().KV.Put(ctx, "increaseRV", "ok")
		if err != nil {
			t.Fatalf("Could not update increaseRV: %v", err)
		}
		return resp.Header.Revision
	}
}

// getKeys mirrors the store's unexported getKeys: all keys under the
// resource prefix, keys only.
func (e *env) getKeys(prefix string) storage.KeysFunc {
	return func(ctx context.Context) ([]string, error) {
		resp, err := e.raw().KV.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		return keys, nil
	}
}

// enableResourceSizeEstimation turns on the store's size-based list cost
// estimate, fed by the keys under /pods/ (what the store's own getKeys
// returns for the default prefixes).
func (e *env) enableResourceSizeEstimation() error {
	type sizeEstimating interface {
		EnableResourceSizeEstimation(storage.KeysFunc) error
	}
	se, ok := e.store.Interface.(sizeEstimating)
	if !ok {
		return fmt.Errorf("store %T has no EnableResourceSizeEstimation", e.store.Interface)
	}
	return se.EnableResourceSizeEstimation(e.getKeys("/pods/"))
}
