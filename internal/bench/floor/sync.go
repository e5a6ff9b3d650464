package floor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dyad-db/dyad/internal/bench/report"
	"github.com/dyad-db/dyad/internal/fsutil"
)

// SyncConfig sizes one fdatasync sample run.
type SyncConfig struct {
	// Dir is where the file is made: the targets' work directory, so the
	// samples hit the same filesystem as their data.
	Dir string
	// Record is the size of each appended record in bytes (default 256).
	Record int
	// Samples is how many appends are timed (default 1000).
	Samples int
	// Limit ends the run early, once at least minSamples are taken, on a
	// disk too slow for Samples in that time (0: no limit).
	Limit time.Duration
	// Now is the clock (default time.Now); tests inject one.
	Now func() time.Time
}

// Preallocated is the size the sample file is preallocated to, as an
// etcd WAL segment is (64 MiB); appends past it extend the file.
const Preallocated = 64 << 20

// minSamples is the fewest appends a Limit may cut a run to.
const minSamples = 100

func (c SyncConfig) withDefaults() SyncConfig {
	if c.Record <= 0 {
		c.Record = 256
	}
	if c.Samples <= 0 {
		c.Samples = 1000
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Sync times appends of one record each followed by fdatasync to a file it
// preallocates in cfg.Dir, the way a write-ahead log appends (etcd's WAL
// preallocates its segments with fallocate and fdatasyncs each save). The
// file is created, preallocated and fdatasynced before the first sample,
// and removed before Sync returns. Each sample is the time of one write
// and its fdatasync.
func Sync(cfg SyncConfig) (report.Dist, error) {
	cfg = cfg.withDefaults()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return report.Dist{}, err
	}
	f, err := os.CreateTemp(cfg.Dir, "floor-*.wal")
	if err != nil {
		return report.Dist{}, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	if err := preallocate(f, Preallocated); err != nil {
		return report.Dist{}, fmt.Errorf("preallocating %s: %w", filepath.Base(f.Name()), err)
	}
	// The directory entry and the preallocation are made durable first,
	// as a WAL does once per segment, so the samples time the append
	// alone.
	if err := f.Sync(); err != nil {
		return report.Dist{}, err
	}
	if err := fsutil.SyncDir(cfg.Dir); err != nil {
		return report.Dist{}, err
	}
	rec := make([]byte, cfg.Record)
	for i := range rec {
		rec[i] = 'a' + byte(i%26)
	}
	fd := int(f.Fd())
	samples := make([]time.Duration, 0, cfg.Samples)
	begin := cfg.Now()
	for i := range cfg.Samples {
		start := cfg.Now()
		if _, err := f.WriteAt(rec, int64(i)*int64(len(rec))); err != nil {
			return report.Dist{}, err
		}
		if err := fdatasync(fd); err != nil {
			return report.Dist{}, fmt.Errorf("fdatasync: %w", err)
		}
		end := cfg.Now()
		samples = append(samples, end.Sub(start))
		if cfg.Limit > 0 && len(samples) >= minSamples && end.Sub(begin) >= cfg.Limit {
			break
		}
	}
	return report.DistOf(samples), nil
}

// preallocate reserves size bytes for f with fallocate, extending it, as
// etcd's fileutil.Preallocate does; a filesystem without fallocate gets a
// sparse file of that size instead.
func preallocate(f *os.File, size int64) error {
	err := syscall.Fallocate(int(f.Fd()), 0, 0, size)
	if errors.Is(err, syscall.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS) {
		return f.Truncate(size)
	}
	return err
}

func fdatasync(fd int) error {
	for {
		err := syscall.Fdatasync(fd)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}
