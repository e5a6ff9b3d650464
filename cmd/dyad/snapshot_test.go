package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSnapshotRestoreIdentityChecked: restore with --initial-cluster checks
// the pair's flags as serve does, before it touches the data dir.
func TestSnapshotRestoreIdentityChecked(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "data")
	cmd := snapshotCmd()
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs([]string{"restore", filepath.Join(t.TempDir(), "absent.db"), "--data-dir", dataDir,
		"--name", "c", "--initial-cluster", "a=http://192.0.2.10:2380,b=http://198.51.100.10:2380"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), `"c"`) {
		t.Fatalf("err = %v, want one naming the unknown member c", err)
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data dir %s: %v, want it never created", dataDir, err)
	}
}
