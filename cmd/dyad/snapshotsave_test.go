package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// snapName is the file name save gives a snapshot taken at t.
func snapName(prefix string, t time.Time) string {
	return prefix + "-" + t.UTC().Format(snapshotStamp) + ".db"
}

func touch(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	slices.Sort(out)
	return out
}

// TestApplyRetention: the count and age rules remove exactly the oldest
// snapshots of the prefix, keep the one just taken whatever the rules say,
// and leave every other file alone.
func TestApplyRetention(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) string { return snapName("dyad", now.Add(-d)) }
	// Six snapshots an hour apart, newest (0h) first.
	var six []string
	for h := range 6 {
		six = append(six, ago(time.Duration(h)*time.Hour))
	}
	foreign := []string{"notes.txt", snapName("other", now.Add(-100*time.Hour)), "dyad-yesterday.db",
		"." + ago(0) + ".123.part"}
	tests := []struct {
		name    string
		retain  int
		maxAge  time.Duration
		keep    string
		removed []string // indexes into six, by name
	}{
		{name: "no rule", keep: six[0]},
		{name: "count", retain: 4, keep: six[0], removed: six[4:]},
		{name: "count above what exists", retain: 10, keep: six[0]},
		{name: "age", maxAge: 150 * time.Minute, keep: six[0], removed: six[3:]},
		{name: "count and age: the stricter wins", retain: 2, maxAge: 150 * time.Minute, keep: six[0], removed: six[2:]},
		{name: "age and count: the stricter wins", retain: 5, maxAge: 90 * time.Minute, keep: six[0], removed: six[2:]},
		{name: "the snapshot just taken stays", retain: 1, maxAge: time.Minute, keep: six[3],
			removed: []string{six[1], six[2], six[4], six[5]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			touch(t, dir, six...)
			touch(t, dir, foreign...)
			removed, err := applyRetention(dir, "dyad", tc.retain, tc.maxAge, now, tc.keep)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(removed)
			want := slices.Clone(tc.removed)
			slices.Sort(want)
			if !slices.Equal(removed, want) {
				t.Fatalf("removed %v, want %v", removed, want)
			}
			var left []string
			for _, n := range append(slices.Clone(six), foreign...) {
				if !slices.Contains(want, n) {
					left = append(left, n)
				}
			}
			slices.Sort(left)
			if got := dirNames(t, dir); !slices.Equal(got, left) {
				t.Fatalf("directory holds %v, want %v", got, left)
			}
		})
	}
}

// TestSnapshotSaveFailureKeepsEverything: when no endpoint gives a
// snapshot, save fails, removes nothing under retention and leaves no
// temporary file behind.
func TestSnapshotSaveFailureKeepsEverything(t *testing.T) {
	now := time.Now()
	dir := t.TempDir()
	old := []string{snapName("dyad", now.Add(-72*time.Hour)), snapName("dyad", now.Add(-48*time.Hour))}
	touch(t, dir, old...)
	// Port 1 on loopback: nothing listens there, the dial fails at once.
	f := &saveFlags{endpoints: "127.0.0.1:1", dialTimeout: 500 * time.Millisecond, commandTimeout: 5 * time.Second,
		dir: dir, prefix: "dyad", retain: 1, retainAge: time.Hour}
	var out, errb bytes.Buffer
	err := runSnapshotSave(context.Background(), &out, &errb, f, "", func() time.Time { return now })
	if err == nil || !strings.Contains(err.Error(), "no snapshot saved") {
		t.Fatalf("save = %v, want a failure", err)
	}
	if got := dirNames(t, dir); !slices.Equal(got, old) {
		t.Fatalf("directory holds %v after a failed save, want only %v", got, old)
	}
}

// TestSnapshotSaveFlags: the mode and retention flags are checked before
// anything is contacted.
func TestSnapshotSaveFlags(t *testing.T) {
	tests := []struct {
		name string
		f    saveFlags
		file string
		want string
	}{
		{name: "neither file nor dir", want: "either FILE or --dir"},
		{name: "both file and dir", f: saveFlags{dir: "d", prefix: "dyad"}, file: "x.db", want: "either FILE or --dir"},
		{name: "retention without dir", f: saveFlags{retain: 3}, file: "x.db", want: "go with --dir"},
		{name: "negative count", f: saveFlags{dir: "d", prefix: "dyad", retain: -1}, want: "negative"},
		{name: "prefix with a slash", f: saveFlags{dir: "d", prefix: "a/b"}, want: "--prefix"},
		{name: "cert without key", f: saveFlags{cert: "c.crt"}, file: "x.db", want: "--cert and --key"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			err := runSnapshotSave(context.Background(), &out, &errb, &tc.f, tc.file, time.Now)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
