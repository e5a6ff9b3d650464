package fsutil

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMkdirAll(t *testing.T) {
	base := t.TempDir()
	if err := os.WriteFile(filepath.Join(base, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		dir     string
		wantErr bool
	}{
		{"new nested", "a/b/c", false},
		{"existing", "a/b", false},
		{"existing again", "a/b/c", false},
		{"trailing slash", "d/e/", false},
		{"under a file", "file/x", true},
		{"is a file", "file", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(base, tt.dir)
			err := MkdirAll(p, 0o700)
			if (err != nil) != tt.wantErr {
				t.Fatalf("MkdirAll(%s) = %v, want error %v", tt.dir, err, tt.wantErr)
			}
			if err == nil {
				if st, err := os.Stat(p); err != nil || !st.IsDir() {
					t.Fatalf("%s not a directory after MkdirAll: %v", tt.dir, err)
				}
			}
		})
	}
}

func TestSyncDirAndCreateDurably(t *testing.T) {
	base := t.TempDir()
	if err := SyncDir(base); err != nil {
		t.Fatal(err)
	}
	if err := SyncDir(filepath.Join(base, "missing")); err == nil {
		t.Fatal("SyncDir of a missing directory succeeded")
	}
	if err := CreateDurably(filepath.Join(base, "missing", "f"), false); err != nil {
		t.Fatalf("CreateDurably of an old file must do nothing: %v", err)
	}
	if err := CreateDurably(filepath.Join(base, "missing", "f"), true); err == nil {
		t.Fatal("CreateDurably in a missing directory succeeded")
	}
}
