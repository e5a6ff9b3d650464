package testutil

import (
	"context"
	"os"
	"testing"
	"time"
)

func TestMain(m *testing.M) { os.Exit(RunMain(m)) }

// TestRepoRoot checks that the module root is found from a package directory.
func TestRepoRoot(t *testing.T) {
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(root + "/go.mod"); err != nil {
		t.Fatalf("RepoRoot()=%s has no go.mod: %v", root, err)
	}
}

// TestPeersBinEnvOverride checks that DYAD_PEERS_BIN replaces the default directory.
func TestPeersBinEnvOverride(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/etcd-x", []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvPeersBin, dir)
	if p, ok := PeersBin("etcd-x"); !ok || p != dir+"/etcd-x" {
		t.Fatalf("PeersBin(etcd-x) = %q, %v; want %q, true", p, ok, dir+"/etcd-x")
	}
	if _, ok := PeersBin("absent"); ok {
		t.Fatal("PeersBin(absent) reported found")
	}
}

// TestServerLifecycle starts the default target (DYAD_TEST_TARGET, else
// dyad), checks its health endpoints, writes, restarts it and reads the
// write back, then stops it cleanly with SIGTERM.
func TestServerLifecycle(t *testing.T) {
	s := Start(t, TargetFromEnv(""))
	cli := s.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cli.Put(ctx, "k", "v"); err != nil {
		t.Fatal(err)
	}
	code, body, err := s.HTTPGet(ctx, "/health")
	if err != nil || code != 200 {
		t.Fatalf("GET /health = %d %q, %v; want 200", code, body, err)
	}
	if s.Kind() == KindDyad {
		// etcd 3.4 has no /readyz; dyad must serve it.
		if code, body, err := s.HTTPGet(ctx, "/readyz"); err != nil || code != 200 {
			t.Fatalf("GET /readyz = %d %q, %v; want 200", code, body, err)
		}
	}
	if err := s.Restart(); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	resp, err := cli.Get(ctx, "k")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("Get after restart = %v; want k=v", resp.Kvs)
	}
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop (SIGTERM) was not clean: %v", err)
	}
	if s.Running() {
		t.Fatal("still running after Stop")
	}
}
