package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/dyad-db/dyad/internal/fsutil"
	"github.com/dyad-db/dyad/internal/storage"
)

// snapshotStamp is the time in a scheduled snapshot's file name: fixed
// width and UTC, so that the names sort as the times do.
const snapshotStamp = "20060102T150405.000000000Z"

// saveFlags are dyad snapshot save's flags; the connection and TLS flags
// carry etcdctl's names.
type saveFlags struct {
	endpoints      string
	dialTimeout    time.Duration
	commandTimeout time.Duration
	cacert, cert   string
	key            string
	insecureSkip   bool

	dir       string
	prefix    string
	retain    int
	retainAge time.Duration
}

func snapshotSaveCmd() *cobra.Command {
	f := &saveFlags{}
	cmd := &cobra.Command{
		Use:   "save [FILE]",
		Short: "Save an etcd-format snapshot from a running node (to FILE, or into --dir with retention)",
		Long: `save streams a snapshot from the first of --endpoints that answers (dyad or
etcd), checks its SHA-256 trailer, and installs it durably: written to a
temporary file, fsynced, renamed, directory fsynced. The file is what
"etcdctl snapshot save" writes; "etcdutl snapshot status" and
"dyad snapshot restore" read it.

With FILE, the snapshot goes there (an existing file is replaced only by a
complete, verified snapshot).

With --dir instead, it goes into DIR as PREFIX-<UTC time>.db, and then the
retention rules run over the files of that shape in DIR (other files are
never touched): with --retain N only the newest N are kept, with
--retain-age D those older than D are removed, with both a file must pass
both rules. The snapshot just taken is always kept, and nothing is removed
when the save fails. This is the mode the shipped systemd timer and
Kubernetes CronJob run (deploy/systemd/dyad-snapshot.*,
deploy/kubernetes/dyad-snapshot-cronjob.yaml).

Either node of a pair can be saved: both hold the same committed state.`,
		Example: `  dyad snapshot save --endpoints https://127.0.0.1:2379 --cacert ca.crt --cert c.crt --key c.key \
    --dir /var/lib/dyad-backup --retain 48 --retain-age 168h`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			file := ""
			if len(args) == 1 {
				file = args[0]
			}
			return runSnapshotSave(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), f, file, time.Now)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.endpoints, "endpoints", "127.0.0.1:2379", "Comma-separated client endpoints, tried in order (https:// for TLS).")
	fl.DurationVar(&f.dialTimeout, "dial-timeout", 5*time.Second, "Time to connect to one endpoint.")
	fl.DurationVar(&f.commandTimeout, "command-timeout", 10*time.Minute, "Time for the whole save from one endpoint.")
	fl.StringVar(&f.cacert, "cacert", "", "Verify the servers' certificates with this CA bundle (TLS).")
	fl.StringVar(&f.cert, "cert", "", "Client certificate, for client ports that require one.")
	fl.StringVar(&f.key, "key", "", "The client certificate's key.")
	fl.BoolVar(&f.insecureSkip, "insecure-skip-tls-verify", false, "Do not verify the servers' certificates (TLS).")
	fl.StringVar(&f.dir, "dir", "", "Save into this directory as PREFIX-<UTC time>.db and apply the retention rules (instead of FILE).")
	fl.StringVar(&f.prefix, "prefix", "dyad", "File name prefix of --dir snapshots; retention only considers files with it.")
	fl.IntVar(&f.retain, "retain", 0, "With --dir: keep only the newest N snapshots (0: no limit by count).")
	fl.DurationVar(&f.retainAge, "retain-age", 0, "With --dir: remove snapshots older than this (0: no limit by age).")
	return cmd
}

// runSnapshotSave is dyad snapshot save; now is its clock, read once for
// the file name and the age rule.
func runSnapshotSave(ctx context.Context, stdout, stderr io.Writer, f *saveFlags, file string, now func() time.Time) error {
	if (file == "") == (f.dir == "") {
		return errors.New("give either FILE or --dir")
	}
	if f.dir == "" && (f.retain != 0 || f.retainAge != 0) {
		return errors.New("--retain and --retain-age go with --dir")
	}
	if f.retain < 0 || f.retainAge < 0 {
		return errors.New("--retain and --retain-age must not be negative")
	}
	if (f.cert == "") != (f.key == "") {
		return errors.New("--cert and --key go together")
	}
	if f.dir != "" && (f.prefix == "" || strings.ContainsAny(f.prefix, "/")) {
		return fmt.Errorf("--prefix %q: want a plain file name prefix", f.prefix)
	}
	t := now().UTC()
	dst := file
	if f.dir != "" {
		if err := fsutil.MkdirAll(f.dir, 0o700); err != nil {
			return err
		}
		dst = filepath.Join(f.dir, f.prefix+"-"+t.Format(snapshotStamp)+".db")
	}
	var errs []error
	saved := false
	for _, ep := range strings.Split(f.endpoints, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		n, err := saveFrom(ctx, ep, f, dst)
		if err != nil {
			fmt.Fprintf(stderr, "snapshot save from %s: %v\n", ep, err)
			errs = append(errs, fmt.Errorf("%s: %w", ep, err))
			continue
		}
		fmt.Fprintf(stdout, "saved %s from %s (%d bytes)\n", dst, ep, n)
		saved = true
		break
	}
	if !saved {
		if len(errs) == 0 {
			return errors.New("--endpoints names no endpoint")
		}
		return fmt.Errorf("no snapshot saved: %w", errors.Join(errs...))
	}
	if f.dir == "" {
		return nil
	}
	removed, err := applyRetention(f.dir, f.prefix, f.retain, f.retainAge, t, filepath.Base(dst))
	for _, r := range removed {
		fmt.Fprintf(stdout, "removed %s (retention)\n", filepath.Join(f.dir, r))
	}
	return err
}

// saveFrom streams one endpoint's snapshot into dst through a temporary
// file in dst's directory, which it removes unless the snapshot passed
// its SHA-256 check and was renamed into place.
func saveFrom(ctx context.Context, ep string, f *saveFlags, dst string) (int64, error) {
	cfg := clientv3.Config{Endpoints: []string{ep}, DialTimeout: f.dialTimeout, Logger: zap.NewNop()}
	if f.cacert != "" || f.cert != "" || f.insecureSkip || strings.HasPrefix(ep, "https://") {
		info := transport.TLSInfo{TrustedCAFile: f.cacert, CertFile: f.cert, KeyFile: f.key, InsecureSkipVerify: f.insecureSkip}
		tc, err := info.ClientConfig()
		if err != nil {
			return 0, fmt.Errorf("TLS: %w", err)
		}
		cfg.TLS = tc
	}
	cli, err := clientv3.New(cfg)
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(ctx, f.commandTimeout)
	defer cancel()
	rc, err := cli.Snapshot(ctx)
	if err != nil {
		return 0, err
	}
	defer rc.Close()

	dir := filepath.Dir(dst)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(dst)+".*.part")
	if err != nil {
		return 0, err
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	n, err := io.Copy(tmp, rc)
	if err != nil {
		return 0, fmt.Errorf("receiving the snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return 0, err
	}
	if err := tmp.Close(); err != nil {
		return 0, err
	}
	if _, err := storage.VerifySnapshot(tmp.Name()); err != nil {
		return 0, err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return 0, err
	}
	done = true
	return n, fsutil.SyncDir(dir)
}

// applyRetention removes from dir the snapshots named PREFIX-<stamp>.db
// that the rules do not keep, and returns their names. Ages come from the
// names, not from modification times (a copied file keeps its name), and
// are measured from now. keep (the snapshot just taken) is never removed.
func applyRetention(dir, prefix string, retain int, maxAge time.Duration, now time.Time, keep string) ([]string, error) {
	if retain == 0 && maxAge == 0 {
		return nil, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	re := regexp.MustCompile(`^` + regexp.QuoteMeta(prefix) + `-(\d{8}T\d{6}\.\d{9}Z)\.db$`)
	type snap struct {
		name string
		at   time.Time
	}
	var snaps []snap
	for _, e := range entries {
		m := re.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		at, err := time.Parse(snapshotStamp, m[1])
		if err != nil {
			continue // not one of ours after all
		}
		snaps = append(snaps, snap{e.Name(), at})
	}
	// Newest first; the name breaks ties so that the order is total.
	sort.Slice(snaps, func(i, j int) bool {
		if !snaps[i].at.Equal(snaps[j].at) {
			return snaps[i].at.After(snaps[j].at)
		}
		return snaps[i].name > snaps[j].name
	})
	var removed []string
	var errs []error
	kept := 0
	for _, s := range snaps {
		tooMany := retain > 0 && kept >= retain
		tooOld := maxAge > 0 && now.Sub(s.at) > maxAge
		if s.name == keep || (!tooMany && !tooOld) {
			kept++
			continue
		}
		if err := os.Remove(filepath.Join(dir, s.name)); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, s.name)
	}
	if len(removed) > 0 {
		if err := fsutil.SyncDir(dir); err != nil {
			errs = append(errs, err)
		}
	}
	return removed, errors.Join(errs...)
}
