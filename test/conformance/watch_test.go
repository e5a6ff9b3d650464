package conformance

import (
	"testing"

	"k8s.io/apiserver/pkg/features"
	storagetesting "k8s.io/apiserver/pkg/storage/testing"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"
)

// One Go test per storagetesting.RunTest*/RunWatch* function of
// watcher_tests.go, wired as k8s.io/apiserver/pkg/storage/etcd3/watcher_test.go
// wires them.

func TestWatch(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatch(e.ctx, t, e.store)
}

func TestClusterScopedWatch(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestClusterScopedWatch(e.ctx, t, e.store)
}

func TestNamespaceScopedWatch(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestNamespaceScopedWatch(e.ctx, t, e.store)
}

func TestDeleteTriggerWatch(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestDeleteTriggerWatch(e.ctx, t, e.store)
}

func TestWatchFromZero(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatchFromZero(e.ctx, t, e.store, e.compactStorage())
}

func TestWatchFromNonZero(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatchFromNonZero(e.ctx, t, e.store)
}

func TestDelayedWatchDelivery(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestDelayedWatchDelivery(e.ctx, t, e.store)
}

func TestWatchError(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatchError(e.ctx, t, e.store)
}

func TestWatchContextCancel(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatchContextCancel(e.ctx, t, e.store)
}

func TestWatcherTimeout(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatcherTimeout(e.ctx, t, e.store)
}

func TestWatchDeleteEventObjectHaveLatestRV(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatchDeleteEventObjectHaveLatestRV(e.ctx, t, e.store)
}

func TestWatchInitializationSignal(t *testing.T) {
	e := setup(t)
	storagetesting.RunTestWatchInitializationSignal(e.ctx, t, e.store)
}

// TestProgressNotify needs the server to send watch progress notifications
// every second (etcd's --experimental-watch-progress-notify-interval).
func TestProgressNotify(t *testing.T) {
	e := setup(t, withProgressNotify())
	storagetesting.RunOptionalTestProgressNotify(e.ctx, t, e.store, e.increaseRV())
}

func TestWatchWithUnsafeDelete(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.AllowUnsafeMalformedObjectDeletion, true)
	e := setup(t)
	storagetesting.RunTestWatchWithUnsafeDelete(e.ctx, t, e.store)
}

// TestWatchDispatchBookmarkEvents checks that allowWatchBookmarks has no
// effect on the etcd3 store: bookmarks come from the watch cache, not etcd.
func TestWatchDispatchBookmarkEvents(t *testing.T) {
	e := setup(t, withProgressNotify())
	storagetesting.RunTestWatchDispatchBookmarkEvents(e.ctx, t, e.store, false)
}

// TestWatchBookmarksWithCorrectResourceVersion is deliberately not run
// against the etcd3 store: RunTestOptionalWatchBookmarksWithCorrectResourceVersion
// expects periodic BOOKMARK events, which only the apiserver's watch cache
// (cacher) produces; the etcd3 store never emits bookmarks (see
// TestWatchDispatchBookmarkEvents, expected=false). Upstream runs it only in
// pkg/storage/cacher's tests, so it says nothing about the server.
func TestWatchBookmarksWithCorrectResourceVersion(t *testing.T) {
	t.Skip("RunTestOptionalWatchBookmarksWithCorrectResourceVersion targets the watch cache (cacher), not the etcd3 store; upstream does not run it for etcd3")
}

func TestSendInitialEventsBackwardCompatibility(t *testing.T) {
	e := setup(t)
	storagetesting.RunSendInitialEventsBackwardCompatibility(e.ctx, t, e.store)
}

func TestWatchSemantics(t *testing.T) {
	e := setup(t)
	storagetesting.RunWatchSemantics(e.ctx, t, e.store)
}

func TestWatchSemanticsWithConcurrentDecode(t *testing.T) {
	featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ConcurrentWatchObjectDecode, true)
	e := setup(t)
	storagetesting.RunWatchSemantics(e.ctx, t, e.store)
}

func TestWatchSemanticInitialEventsExtended(t *testing.T) {
	e := setup(t)
	storagetesting.RunWatchSemanticInitialEventsExtended(e.ctx, t, e.store)
}

func TestWatchListMatchSingle(t *testing.T) {
	e := setup(t)
	storagetesting.RunWatchListMatchSingle(e.ctx, t, e.store)
}

func TestWatchErrorIsBlockingFurtherEvents(t *testing.T) {
	e := setup(t)
	storagetesting.RunWatchErrorIsBlockingFurtherEvents(e.ctx, t, e.store)
}
