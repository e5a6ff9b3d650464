package twozone

import (
	"context"
	"crypto/x509/pkix"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dyad-db/dyad/internal/certs"
	"github.com/dyad-db/dyad/internal/dds"
	"github.com/dyad-db/dyad/internal/testenv"
	"github.com/dyad-db/dyad/test/testutil"
)

// requireSecurityPlugins skips (fails in CI) where Debian's Cyclone
// security plugins are absent (they ship with libddsc0debian, which
// cyclonedds-dev pulls in).
func requireSecurityPlugins(t *testing.T) {
	testenv.NeedFile(t, filepath.Join(dds.DefaultSecurityPluginDir, "libdds_security_auth.so"),
		"Cyclone DDS Security plugins", "install Debian's libddsc0debian (scripts/setup.sh does)")
}

// makePKI runs `dyad certs` for the pair into dir.
func (z *zones) makePKI(dir string) {
	out, err := exec.Command(z.bin, "certs", "--dir", dir, "--node", "a="+z.net.ClientIP(testutil.ZoneA), "--node", "b="+z.net.ClientIP(testutil.ZoneB)).CombinedOutput()
	if err != nil {
		z.t.Fatalf("dyad certs: %v\n%s", err, out)
	}
}

// peerFlags are the DDS Security flags for node name with material in dir.
func peerFlags(dir, name string) []string {
	f := certs.Files(dir, name)
	return []string{"--peer-cert-file", f.PeerCert, "--peer-key-file", f.PeerKey,
		"--peer-trusted-ca-file", filepath.Join(dir, certs.CACertFile),
		"--dds-governance-file", filepath.Join(dir, certs.GovernanceFile),
		"--dds-permissions-file", filepath.Join(dir, certs.PermissionsFile)}
}

// serializableCount counts prefix on node i from its own store; -1 if the
// node does not answer.
func serializableCount(z *zones, i int, prefix string) int64 {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{z.endpoint(i)}, DialTimeout: 500 * time.Millisecond})
	if err != nil {
		return -1
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithSerializable())
	if err != nil {
		return -1
	}
	return resp.Count
}

func waitCount(t *testing.T, z *zones, i int, prefix string, want int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	var got int64
	for time.Now().Before(deadline) {
		if got = serializableCount(z, i, prefix); got == want {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("node %c holds %d keys under %s, want %d", 'a'+i, got, prefix, want)
}

// TestSecurePairReplicatesAndFailsOver: with DDS Security (authentication,
// encrypted topics, access control) the pair forms, replicates
// synchronously and fails over as a plain pair does.
func TestSecurePairReplicatesAndFailsOver(t *testing.T) {
	requireSecurityPlugins(t)
	z := newZones(t)
	pki := filepath.Join(z.dir, "pki")
	z.makePKI(pki)
	z.start(0, peerFlags(pki, "a")...)
	z.start(1, peerFlags(pki, "b")...)
	leader := z.waitPair(20 * time.Second)
	for i := range 2 {
		if !z.logContains(i, "dds-security=true") {
			t.Fatalf("node %c does not report DDS Security on", 'a'+i)
		}
	}
	putMany(t, z, leader, 200, "sec")
	// Synchronous replication: the replica already holds every acknowledged key.
	if got := serializableCount(z, 1-leader, "sec"); got != 200 {
		t.Fatalf("replica holds %d of 200 acknowledged keys", got)
	}
	z.kill(leader)
	z.waitLeading(1-leader, 10*time.Second)
	putMany(t, z, 1-leader, 10, "after")
	if got := countKeys(t, z, 1-leader, "sec"); got != 200 {
		t.Fatalf("after failover the survivor holds %d of 200 keys", got)
	}
}

// TestPeerWithoutCredentialsNeverJoins: node a runs secured and alone; a
// process posing as node b without DDS Security, with a complete set of
// material from another CA, or with an identity from the right CA but
// permissions the pair's CA never signed, never pairs with a and never
// receives a key written on a. The real b then joins, which shows the same
// observations do change when credentials are valid.
func TestPeerWithoutCredentialsNeverJoins(t *testing.T) {
	requireSecurityPlugins(t)
	z := newZones(t)
	pki, rogue := filepath.Join(z.dir, "pki"), filepath.Join(z.dir, "rogue")
	z.makePKI(pki)
	z.makePKI(rogue)
	unpermitted := unpermittedMaterial(t, z.dir, pki, rogue)

	z.start(0, peerFlags(pki, "a")...)
	z.waitLeading(0, 15*time.Second)
	intruders := []struct {
		name  string
		flags []string
	}{
		{"no DDS Security", nil},
		{"certificates from another CA", peerFlags(rogue, "b")},
		{"permissions not signed by the pair's CA", unpermitted},
	}
	written := 0
	for n, in := range intruders {
		t.Run(in.name, func(t *testing.T) {
			args := append([]string{"--data-dir", filepath.Join(z.dir, fmt.Sprintf("intruder-%d", n))}, in.flags...)
			z.start(1, args...)
			logPath := z.Proc(testutil.ZoneB).LogPath()
			defer z.kill(1)
			// Write on a, then let the intruder run for longer than
			// discovery plus a DDS Security handshake (about 0.3 s) and
			// two peer leases of its own (its ticks, not a sleep: on a
			// loaded machine it may barely run in a given wall time).
			cli := z.client(0)
			for k := 0; k < 30; k++ {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_, err := cli.Put(ctx, fmt.Sprintf("secret/%04d", written), "x")
				cancel()
				if err != nil {
					t.Fatalf("write on a while the intruder runs: %v", err)
				}
				written++
			}
			z.runFor(1, 3*z.lease)
			b, _ := os.ReadFile(logPath)
			if !strings.Contains(string(b), "msg=serving") {
				t.Fatalf("the intruder did not run, so it tested nothing:\n%s", b)
			}
			if got := serializableCount(z, 1, "secret"); got > 0 {
				t.Errorf("the intruder serves %d of a's keys", got)
			}
			if strings.Contains(string(b), "to=replica") {
				t.Errorf("the intruder became a's replica:\n%s", b)
			}
			if z.logContains(0, "to=primary") {
				t.Error("a paired (role primary) with the intruder")
			}
		})
	}

	// Control: the real b, with the pair's material, joins and receives
	// everything, so the checks above can fail.
	z.start(1, peerFlags(pki, "b")...)
	waitCount(t, z, 1, "secret", int64(written), 20*time.Second)
	// a pairs once b has stayed caught up for a peer lease.
	deadline := time.Now().Add(20 * time.Second)
	for !z.logContains(0, "to=primary") {
		if time.Now().After(deadline) {
			t.Fatal("a never reported pairing with the real b")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// unpermittedMaterial makes node b's flags with an identity signed by the
// pair's CA (so authentication succeeds) but governance and permissions
// signed by the rogue CA, named as b's permissions CA. The documents grant
// the identity everything, yet a checks them against its own permissions
// CA and refuses.
func unpermittedMaterial(t *testing.T, dir, pki, rogue string) []string {
	t.Helper()
	load := func(d string) *certs.CA {
		c, err1 := os.ReadFile(filepath.Join(d, certs.CACertFile))
		k, err2 := os.ReadFile(filepath.Join(d, certs.CAKeyFile))
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		ca, err := certs.LoadCA(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca, rca := load(pki), load(rogue)
	now := time.Now().Add(-time.Hour)
	id, err := ca.Issue(certs.Request{Subject: pkix.Name{CommonName: "mallory", Organization: []string{"dyad"}}, Usage: certs.UsageIdentity, NotBefore: now, Validity: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	gov, err := rca.SignSMIME(certs.Governance(certs.AnyDomain))
	if err != nil {
		t.Fatal(err)
	}
	perm, err := rca.SignSMIME(certs.Permissions([]certs.Grant{{Name: "mallory", Subject: "CN=mallory,O=dyad", Domain: certs.AnyDomain,
		Topics: []string{"*"}, NotBefore: now, NotAfter: now.Add(24 * time.Hour)}}))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "mallory")
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{"id.crt": id.CertPEM, "id.key": id.KeyPEM, "gov.p7s": gov, "perm.p7s": perm}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(out, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return []string{"--peer-cert-file", filepath.Join(out, "id.crt"), "--peer-key-file", filepath.Join(out, "id.key"),
		"--peer-trusted-ca-file", filepath.Join(pki, certs.CACertFile),
		"--dds-permissions-ca-file", filepath.Join(rogue, certs.CACertFile),
		"--dds-governance-file", filepath.Join(out, "gov.p7s"), "--dds-permissions-file", filepath.Join(out, "perm.p7s")}
}
