package fsutil

import (
	"errors"
	"os"
	"path/filepath"
)

// SyncDir fsyncs the directory dir, making the creations, renames and
// removals of entries in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// MkdirAll is os.MkdirAll made durable: each directory it creates is
// fsynced into its parent before MkdirAll returns. Directories that exist
// already are taken as durable.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	if st, err := os.Stat(dir); err == nil {
		if !st.IsDir() {
			return &os.PathError{Op: "mkdir", Path: dir, Err: errors.New("not a directory")}
		}
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := MkdirAll(parent, perm); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, perm); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return SyncDir(parent)
}

// CreateDurably makes sure a file created at path, once its own contents
// are fsynced, survives a power loss: it fsyncs the parent directory when
// created is true. It is a no-op otherwise, so that callers can pass
// "did not exist before" straight in.
func CreateDurably(path string, created bool) error {
	if !created {
		return nil
	}
	return SyncDir(filepath.Dir(path))
}
