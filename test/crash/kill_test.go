package crash

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/test/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }

// TestKill9LosesNoAcknowledgedWrite kills dyad with SIGKILL three times
// while 16 clients write, and checks after each restart that every write
// that was acknowledged is there with the revision it was acknowledged at,
// and that revisions keep rising.
func TestKill9LosesNoAcknowledgedWrite(t *testing.T) {
	srv := testutil.StartDyad(t)
	var acked acks
	lastRev := int64(0)
	for round := 0; round < 3; round++ {
		cli, err := clientv3.New(srv.ClientConfig())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		// A put the kill fails has an unknown outcome: its writer stops.
		wait := writeUntil(ctx, cli, 16, func(w, i int) string { return fmt.Sprintf("r%d/w%02d/%06d", round, w, i) }, &acked, false)
		time.Sleep(700 * time.Millisecond)
		srv.Kill()
		cancel()
		wait()
		cli.Close()
		if err := srv.Restart(); err != nil {
			t.Fatalf("restart after kill -9: %v\n%s", err, srv.LogTail())
		}
		cli = srv.Client(t)
		c, cc := context.WithTimeout(context.Background(), 30*time.Second)
		all, err := cli.Get(c, "r", clientv3.WithPrefix())
		cc()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, kv := range all.Kvs {
			got[string(kv.Key)] = kv.ModRevision
		}
		for _, a := range acked.all() {
			rev, ok := got[a.key]
			if !ok {
				t.Fatalf("round %d: acknowledged write %s (rev %d) lost after kill -9", round, a.key, a.rev)
			}
			if rev != a.rev {
				t.Fatalf("round %d: %s acknowledged at rev %d, found at rev %d", round, a.key, a.rev, rev)
			}
		}
		if all.Header.Revision < lastRev {
			t.Fatalf("revision ran backwards across restart: %d -> %d", lastRev, all.Header.Revision)
		}
		lastRev = all.Header.Revision
		t.Logf("round %d: %d acknowledged writes all present, revision %d", round, acked.len(), lastRev)
	}
	if acked.len() < 100 {
		t.Fatalf("only %d writes acknowledged: the test did not exercise the write path", acked.len())
	}
}
