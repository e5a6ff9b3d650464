package clientv3

import (
	"context"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/dyad-db/dyad/test/testutil"
)

const envTarget = "DYAD_CLIENTV3_TARGET"

// waitTimeout bounds every wait for something that must happen.
const waitTimeout = 15 * time.Second

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// startServer starts a fresh server of the suite's target.
func startServer(t *testing.T) *testutil.Server {
	t.Helper()
	return testutil.Start(t, testutil.TargetFromEnv(envTarget))
}

// newSession opens a session on its own client (as separate processes
// would), closed on cleanup.
func newSession(t *testing.T, srv *testutil.Server, ttl int) (*concurrency.Session, *clientv3.Client) {
	t.Helper()
	cli := srv.Client(t)
	s, err := concurrency.NewSession(cli, concurrency.WithTTL(ttl))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s, cli
}

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitKeys polls until the prefix holds exactly n keys.
func waitKeys(t *testing.T, cli *clientv3.Client, prefix string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		resp, err := cli.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prefix %q: want %d keys within %v, have %v (err %v)", prefix, n, waitTimeout, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// result of an asynchronous call.
type async struct{ done chan error }

func goAsync(f func() error) *async {
	a := &async{done: make(chan error, 1)}
	go func() { a.done <- f() }()
	return a
}

// pending asserts the call has not returned yet.
func (a *async) pending(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-a.done:
		t.Fatalf("%s returned early (err %v); it must block", what, err)
	default:
	}
}

// wait waits for the call to return and returns its error.
func (a *async) wait(t *testing.T, what string) error {
	t.Helper()
	select {
	case err := <-a.done:
		return err
	case <-time.After(waitTimeout):
		t.Fatalf("%s did not return within %v", what, waitTimeout)
		return nil
	}
}
