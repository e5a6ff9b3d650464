package site

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// k3s cannot be built here (the Go module proxy refuses
// github.com/k3s-io/k3s), so this file drives dyad the way k3s does
// through --datastore-endpoint, with a client shaped as kine's etcd backend
// client (kine's pkg/client and pkg/tls, which k3s uses for an https://
// endpoint): the same TLS wiring, the same dial settings, and the same
// conditional transactions on the /bootstrap keys that k3s' cluster
// bootstrap performs when its first server starts, when a second server
// joins, when the token is rotated and when an old key is migrated.

// k3sDatastore holds k3s' four datastore flags.
type k3sDatastore struct {
	endpoint                  string // --datastore-endpoint
	caFile, certFile, keyFile string // --datastore-cafile/-certfile/-keyfile
}

// errKeyExists is what kine's Create reports when the key is there.
var errKeyExists = errors.New("key exists")

// kineClient is kine's etcd client contract: values carry their
// ModRevision, Create and Update and Delete are transactions conditioned
// on it.
type kineClient struct{ c *clientv3.Client }

type kineValue struct {
	key, data string
	modified  int64
}

// newKineClient builds the client as kine does for an etcd endpoint: the
// endpoint string split on commas, kine's TLS config turned into etcd's
// TLSInfo (CA as the trusted CA), a 5 s dial timeout.
func newKineClient(t *testing.T, ds k3sDatastore) *kineClient {
	t.Helper()
	info := transport.TLSInfo{CertFile: ds.certFile, KeyFile: ds.keyFile, TrustedCAFile: ds.caFile}
	tc, err := info.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(ds.endpoint, ","), DialTimeout: 5 * time.Second, TLS: tc, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &kineClient{c}
}

// list is a prefix range at revision 0 (the newest), as kine's List(key, 0).
func (k *kineClient) list(ctx context.Context, prefix string) ([]kineValue, error) {
	resp, err := k.c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(0))
	if err != nil {
		return nil, err
	}
	var out []kineValue
	for _, kv := range resp.Kvs {
		out = append(out, kineValue{string(kv.Key), string(kv.Value), kv.ModRevision})
	}
	return out, nil
}

func (k *kineClient) get(ctx context.Context, key string) (kineValue, bool, error) {
	resp, err := k.c.Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		return kineValue{}, false, err
	}
	kv := resp.Kvs[0]
	return kineValue{string(kv.Key), string(kv.Value), kv.ModRevision}, true, nil
}

func (k *kineClient) create(ctx context.Context, key, data string) (int64, error) {
	resp, err := k.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", 0)).Then(clientv3.OpPut(key, data)).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, errKeyExists
	}
	return resp.Header.Revision, nil
}

func (k *kineClient) update(ctx context.Context, key string, rev int64, data string) (int64, error) {
	resp, err := k.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpPut(key, data)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return 0, err
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("revision %d does not match", rev)
	}
	return resp.Header.Revision, nil
}

func (k *kineClient) delete(ctx context.Context, key string, rev int64) error {
	resp, err := k.c.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
		Then(clientv3.OpDelete(key)).Else(clientv3.OpGet(key)).Commit()
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return fmt.Errorf("revision %d does not match", rev)
	}
	return nil
}

// bootstrapKey is where k3s keeps its bootstrap data for a token: the
// first 12 hex digits of the token's SHA-256 under /bootstrap/.
func bootstrapKey(token string) string {
	h := sha256.Sum256([]byte(token))
	return "/bootstrap/" + hex.EncodeToString(h[:])[:12]
}

// TestK3sDatastoreEndpoint runs k3s' datastore sequence against a secure
// pair named by both zones in one --datastore-endpoint: the first server
// finds no bootstrap data and creates it, a second server (endpoints in the
// other order) finds and reads it, a restart's create finds the key there,
// a token rotation updates it and an old-token key is migrated and
// deleted, each conditioned on the revision it read; a watch on /bootstrap
// sees every change in order. Then zone a's node dies, and the same
// client, with no change, reads the data and writes again through zone b.
func TestK3sDatastoreEndpoint(t *testing.T) {
	_, nodes, pki, procs := startStaticPodPair(t)
	url := func(zone string) string { return "https://" + loopbackOf(zoneIP(zone)) + ":" + nodes[zone].client }
	ds := k3sDatastore{endpoint: url("a") + "," + url("b"), caFile: filepath.Join(pki, "ca.crt"),
		certFile: filepath.Join(pki, "apiserver-etcd-client.crt"), keyFile: filepath.Join(pki, "apiserver-etcd-client.key")}
	ctx, cancel := context.WithTimeout(context.Background(), startupWait)
	defer cancel()

	first := newKineClient(t, ds)
	watcher := newKineClient(t, k3sDatastore{endpoint: url("b"), caFile: ds.caFile, certFile: ds.certFile, keyFile: ds.keyFile})
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	start, err := first.c.Get(ctx, "/bootstrap", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	wch := watcher.c.Watch(wctx, "/bootstrap", clientv3.WithPrefix(), clientv3.WithRev(start.Header.Revision+1))
	type change struct {
		kind, key, data string
		rev             int64
	}
	var want []change

	// The first server: nothing there yet, so it saves its data.
	token := "K10-site-token"
	key := bootstrapKey(token)
	if vals, err := first.list(ctx, "/bootstrap"); err != nil || len(vals) != 0 {
		t.Fatalf("first server's list: %v %v, want no bootstrap data", vals, err)
	}
	rev, err := first.create(ctx, key, "bootstrap-v1")
	if err != nil {
		t.Fatalf("first server's create: %v", err)
	}
	want = append(want, change{"PUT", key, "bootstrap-v1", rev})

	// A second server, joining from the other zone with the same token.
	second := newKineClient(t, k3sDatastore{endpoint: url("b") + "," + url("a"), caFile: ds.caFile, certFile: ds.certFile, keyFile: ds.keyFile})
	vals, err := second.list(ctx, "/bootstrap")
	if err != nil || len(vals) != 1 || vals[0].key != key || vals[0].data != "bootstrap-v1" || vals[0].modified != rev {
		t.Fatalf("second server's list: %+v %v, want %s = bootstrap-v1 at %d", vals, err, key, rev)
	}
	if v, ok, err := second.get(ctx, key); err != nil || !ok || v.data != "bootstrap-v1" || v.modified != rev {
		t.Fatalf("second server's get: %+v %v %v", v, ok, err)
	}

	// The first server restarts: its create finds the key, which k3s
	// takes as "already saved".
	if _, err := first.create(ctx, key, "bootstrap-v1"); !errors.Is(err, errKeyExists) {
		t.Fatalf("create over an existing key: %v, want key exists", err)
	}

	// Token rotation: update conditioned on the revision listed.
	rev2, err := second.update(ctx, key, vals[0].modified, "bootstrap-v2")
	if err != nil {
		t.Fatalf("rotation's update: %v", err)
	}
	want = append(want, change{"PUT", key, "bootstrap-v2", rev2})
	if _, err := first.update(ctx, key, vals[0].modified, "bootstrap-stale"); err == nil {
		t.Fatal("an update at a stale revision succeeded")
	}

	// Migration of data saved under an old token's key: create the new
	// key, then delete the old one at the revision read.
	oldKey := bootstrapKey("")
	oldRev, err := first.create(ctx, oldKey, "bootstrap-old")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, change{"PUT", oldKey, "bootstrap-old", oldRev})
	if err := second.delete(ctx, oldKey, oldRev-1); err == nil {
		t.Fatal("a delete at a stale revision succeeded")
	}
	if err := second.delete(ctx, oldKey, oldRev); err != nil {
		t.Fatalf("migration's delete: %v", err)
	}
	after, err := second.list(ctx, "/bootstrap")
	if err != nil || len(after) != 1 || after[0].key != key || after[0].data != "bootstrap-v2" {
		t.Fatalf("after the migration: %+v %v, want only %s = bootstrap-v2", after, err, key)
	}
	want = append(want, change{"DELETE", oldKey, "", after[0].modified})
	if after[0].modified != rev2 {
		t.Fatalf("%s modified at %d, want %d", key, after[0].modified, rev2)
	}

	var got []change
	for len(got) < len(want) {
		select {
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				t.Fatalf("watch ended after %v: %v", got, wr.Err())
			}
			for _, ev := range wr.Events {
				got = append(got, change{ev.Type.String(), string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.ModRevision})
			}
		case <-ctx.Done():
			t.Fatalf("watch saw %v, want %v", got, want)
		}
	}
	// The delete's revision is only known from the watch.
	want[3].rev = got[3].rev
	if fmt.Sprint(got) != fmt.Sprint(want) || got[3].rev <= oldRev {
		t.Fatalf("watch saw\n%v\nwant\n%v", got, want)
	}
	wcancel()

	// Zone a's node dies. k3s' client keeps its endpoint list; it must
	// reach zone b's node, which takes over.
	procs["a"].cmd.Process.Kill()
	<-procs["a"].exited
	killed := time.Now()
	var last error
	for {
		// An earlier attempt whose answer was lost may have written the
		// key already; nothing else writes it.
		_, err := second.create(ctx, "/registry/k3s/after-zone-loss", "x")
		if err == nil || errors.Is(err, errKeyExists) {
			break
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("no write through --datastore-endpoint after zone a died within %v: %v", startupWait, last)
		case <-time.After(100 * time.Millisecond): // retry interval
		}
	}
	t.Logf("first write through --datastore-endpoint %v after zone a's node was killed", time.Since(killed).Round(time.Millisecond))
	if vals, err := first.list(ctx, "/bootstrap"); err != nil || len(vals) != 1 || vals[0].data != "bootstrap-v2" {
		t.Fatalf("first server's list after zone a died: %+v %v", vals, err)
	}
}
