package conformance

import (
	"fmt"
	"testing"

	"k8s.io/apiserver/pkg/features"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// One Go test per storagetesting.RunTest* function of store_tests.go, wired
// as k8s.io/apiserver/pkg/storage/etcd3/store_test.go wires them.

func TestCreate(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestCreate(e.ctx, t, e.store, e.checkStorageInvariants())
}

func TestCreateWithTTL(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestCreateWithTTL(e.ctx, t, e.store)
}

func TestCreateWithKeyExist(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestCreateWithKeyExist(e.ctx, t, e.store)
}

func TestGet(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGet(e.ctx, t, e.store)
}

func TestUnconditionalDelete(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestUnconditionalDelete(e.ctx, t, e.store)
}

func TestConditionalDelete(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestConditionalDelete(e.ctx, t, e.store)
}

func TestDeleteWithSuggestion(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestDeleteWithSuggestion(e.ctx, t, e.store)
}

func TestDeleteWithSuggestionAndConflict(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestDeleteWithSuggestionAndConflict(e.ctx, t, e.store)
}

func TestDeleteWithSuggestionOfDeletedObject(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestDeleteWithSuggestionOfDeletedObject(e.ctx, t, e.store)
}

func TestValidateDeletionWithSuggestion(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestValidateDeletionWithSuggestion(e.ctx, t, e.store)
}

func TestValidateDeletionWithOnlySuggestionValid(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestValidateDeletionWithOnlySuggestionValid(e.ctx, t, e.store)
}

func TestDeleteWithConflict(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestDeleteWithConflict(e.ctx, t, e.store)
}

func TestPreconditionalDeleteWithSuggestion(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestPreconditionalDeleteWithSuggestion(e.ctx, t, e.store)
}

func TestPreconditionalDeleteWithOnlySuggestionPass(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestPreconditionalDeleteWithOnlySuggestionPass(e.ctx, t, e.store)
}

func TestListPaging(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestListPaging(e.ctx, t, e.store)
}

func TestGetListNonRecursive(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGetListNonRecursive(e.ctx, t, e.increaseRV(), e.store)
}

func TestGetListRecursivePrefix(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGetListRecursivePrefix(e.ctx, t, e.store)
}

func TestKeySchema(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestKeySchema(e.ctx, t, e.store)
}

func TestGuaranteedUpdate(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGuaranteedUpdate(e.ctx, t, e.store, e.checkStorageInvariants())
}

func TestGuaranteedUpdateWithTTL(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGuaranteedUpdateWithTTL(e.ctx, t, e.store)
}

func TestGuaranteedUpdateChecksStoredData(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGuaranteedUpdateChecksStoredData(e.ctx, t, e.store)
}

func TestGuaranteedUpdateWithConflict(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGuaranteedUpdateWithConflict(e.ctx, t, e.store)
}

func TestGuaranteedUpdateWithSuggestionAndConflict(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestGuaranteedUpdateWithSuggestionAndConflict(e.ctx, t, e.store)
}

func TestTransformationFailure(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestTransformationFailure(e.ctx, t, e.store)
}

func TestList(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestList(e.ctx, t, e.store, e.compactStorage(), false,
		e.client.Kubernetes.(*storagetesting.KubernetesRecorder))
}

func TestConsistentList(t *testing.T) {
	e := setup(t)
	// cacheEnabled=false, consistentReadsSupported=true, listFromCacheSnapshot=false
	storagetesting.RunTestConsistentList(e.ctx, t, e.store, e.increaseRV(), false, true, false)
}

func TestCompactRevision(t *testing.T) {
	// The store must observe external changes of the compaction revision,
	// which needs the compactor's watch on the compact key; that watch only
	// runs with ListFromCacheSnapshot (as upstream).
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
	e := setup(t)
	storagetesting.RunTestCompactRevision(e.ctx, t, e.store, e.increaseRV(), e.compactStorage())
}

func TestListContinuation(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestListContinuation(e.ctx, t, e.store, e.checkStorageCallsInvariants())
}

func TestListPaginationRareObject(t *testing.T) {
	// ListFromCacheSnapshot adds a Get of the compact key that the call
	// counting does not expect (as upstream).
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, false)
	e := setup(t)
	storagetesting.RunTestListPaginationRareObject(e.ctx, t, e.store, e.checkStorageCallsInvariants())
}

func TestListContinuationWithFilter(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestListContinuationWithFilter(e.ctx, t, e.store, e.checkStorageCallsInvariants())
}

func TestNamespaceScopedList(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestNamespaceScopedList(e.ctx, t, e.store)
}

func TestListInconsistentContinuation(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestListInconsistentContinuation(e.ctx, t, e.store, e.compactStorage())
}

func TestListResourceVersionMatch(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestListResourceVersionMatch(e.ctx, t, e.store)
}

func TestStats(t *testing.T) {
	for _, sizeBasedListCostEstimate := range []bool{true, false} {
		t.Run(fmt.Sprintf("SizeBasedListCostEstimate=%v", sizeBasedListCostEstimate), func(t *testing.T) {
			e := setup(t)
			if sizeBasedListCostEstimate {
				if err := e.enableResourceSizeEstimation(); err != nil {
					t.Fatal(err)
				}
			}
			storagetesting.RunTestStats(e.ctx, t, e.store, e.codec, e.store.transformer, sizeBasedListCostEstimate)
		})
	}
}
