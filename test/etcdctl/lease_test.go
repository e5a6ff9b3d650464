package etcdctl

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	grantRE = regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\((\d+)s\)\n$`)
	ttlRE   = regexp.MustCompile(`^lease ([0-9a-f]{16}) granted with TTL\((\d+)s\), remaining\((\d+)s\)(, attached keys\(\[(.*)\]\))?\n$`)
)

func (c *ctl) grant(t *testing.T, ttl int) string {
	t.Helper()
	out := c.ok(t, "lease", "grant", strconv.Itoa(ttl))
	m := grantRE.FindStringSubmatch(out)
	if m == nil || m[2] != strconv.Itoa(ttl) {
		t.Fatalf("lease grant %d = %q; want \"lease <16 hex> granted with TTL(%ds)\"", ttl, out, ttl)
	}
	return m[1]
}

// TestLease covers lease grant, list, timetolive (with --keys), keep-alive
// --once and revoke, and that revoking deletes the attached keys.
func TestLease(t *testing.T) {
	c := newCtl(t)
	id := c.grant(t, 600)
	id2 := c.grant(t, 300)

	t.Run("list", func(t *testing.T) {
		out := c.ok(t, "lease", "list")
		got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		if len(got) != 3 || got[0] != "found 2 leases" {
			t.Fatalf("lease list = %q; want 'found 2 leases' and two ids", out)
		}
		ids := map[string]bool{got[1]: true, got[2]: true}
		if !ids[id] || !ids[id2] {
			t.Errorf("lease list ids %v; want %s and %s", got[1:], id, id2)
		}
	})

	c.expect(t, "OK\n", "put", "lk1", "a", "--lease="+id)
	c.expect(t, "OK\n", "put", "lk2", "b", "--lease="+id)
	c.expect(t, "OK\n", "put", "free", "c")

	t.Run("timetolive", func(t *testing.T) {
		out := c.ok(t, "lease", "timetolive", id)
		m := ttlRE.FindStringSubmatch(out)
		if m == nil || m[1] != id || m[2] != "600" || m[4] != "" {
			t.Fatalf("lease timetolive = %q; want granted TTL(600s) and no keys", out)
		}
		if rem, _ := strconv.Atoi(m[3]); rem < 590 || rem > 600 {
			t.Errorf("remaining %ds, want 590..600", rem)
		}
	})
	t.Run("timetolive keys", func(t *testing.T) {
		out := c.ok(t, "lease", "timetolive", id, "--keys")
		m := ttlRE.FindStringSubmatch(out)
		if m == nil || m[1] != id {
			t.Fatalf("lease timetolive --keys = %q; want attached keys([lk1 lk2])", out)
		}
		// The order of attached keys is unspecified (etcd keeps them in a map).
		keys := strings.Fields(m[5])
		sort.Strings(keys)
		if strings.Join(keys, " ") != "lk1 lk2" {
			t.Errorf("attached keys = %q, want lk1 and lk2", m[5])
		}
	})
	t.Run("timetolive json", func(t *testing.T) {
		var r struct {
			ID         int64    `json:"id"`
			TTL        int64    `json:"ttl"`
			GrantedTTL int64    `json:"granted-ttl"`
			Keys       [][]byte `json:"keys"`
		}
		c.json(t, &r, "lease", "timetolive", id, "--keys")
		if fmt.Sprintf("%016x", r.ID) != id || r.GrantedTTL != 600 || r.TTL < 590 || r.TTL > 600 || len(r.Keys) != 2 {
			t.Errorf("timetolive -w json = %+v; want id %s, granted-ttl 600, ttl 590..600, 2 keys", r, id)
		}
	})
	t.Run("get shows lease", func(t *testing.T) {
		var r getResp
		c.json(t, &r, "get", "lk1")
		if len(r.Kvs) != 1 || fmt.Sprintf("%016x", r.Kvs[0].Lease) != id {
			t.Errorf("get lk1: %+v; want lease %s", r.Kvs, id)
		}
	})
	t.Run("keep-alive once", func(t *testing.T) {
		c.expect(t, fmt.Sprintf("lease %s keepalived with TTL(600)\n", id), "lease", "keep-alive", "--once", id)
		var r struct {
			ID  int64
			TTL int64
		}
		c.json(t, &r, "lease", "keep-alive", "--once", id)
		if fmt.Sprintf("%016x", r.ID) != id || r.TTL != 600 {
			t.Errorf("keep-alive --once -w json = %+v; want ID %s TTL 600", r, id)
		}
	})
	t.Run("keep-alive of unknown lease", func(t *testing.T) {
		c.expectErr(t, "etcdserver: requested lease not found", "lease", "keep-alive", "--once", "1234abcd")
	})
	t.Run("put with unknown lease", func(t *testing.T) {
		c.expectErr(t, "etcdserver: requested lease not found", "put", "x", "y", "--lease=1234abcd")
	})
	t.Run("revoke", func(t *testing.T) {
		before := c.rev(t)
		c.expect(t, fmt.Sprintf("lease %s revoked\n", id), "lease", "revoke", id)
		c.expect(t, "", "get", "lk", "--prefix")
		c.expect(t, lines("free", "c"), "get", "free")
		// Revoking deletes both keys in one revision.
		if after := c.rev(t); after != before+1 {
			t.Errorf("revision after revoke = %d, want %d", after, before+1)
		}
		c.expect(t, fmt.Sprintf("lease %s already expired\n", id), "lease", "timetolive", id)
		c.expectErr(t, "etcdserver: requested lease not found", "lease", "revoke", id)
		out := c.ok(t, "lease", "list")
		if out != lines("found 1 leases", id2) {
			t.Errorf("lease list after revoke = %q, want only %s", out, id2)
		}
	})
	t.Run("expiry deletes keys", func(t *testing.T) {
		short := c.grant(t, 2)
		c.expect(t, "OK\n", "put", "ephemeral", "e", "--lease="+short)
		eventually(t, 15*time.Second, func() error {
			if out := c.ok(t, "get", "ephemeral"); out != "" {
				return fmt.Errorf("key attached to a 2s lease still present: %q", out)
			}
			return nil
		})
		c.expect(t, fmt.Sprintf("lease %s already expired\n", short), "lease", "timetolive", short)
	})
}
