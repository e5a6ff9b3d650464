package server

import (
	"context"
	"fmt"
	"strconv"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/dyad-db/dyad/internal/mvcc"
)

// compactJob is the physical part of an applied compaction.
type compactJob struct {
	c    *mvcc.Compaction
	done chan error // nil unless the caller waits (physical=true)
}

// compactor removes compacted revisions from disk, one job at a time, off
// the applier's path.
func (s *Server) compactor(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case j := <-s.compactc:
			start := time.Now()
			s.compactMu.Lock()
			err := s.store.PhysicalCompact(j.c)
			s.compactMu.Unlock()
			if err != nil {
				s.log.Error("physical compaction failed", "revision", j.c.Rev, "err", err)
			} else {
				s.log.Info("compacted", "revision", j.c.Rev, "took", time.Since(start))
			}
			if j.done != nil {
				j.done <- err
			}
		}
	}
}

// ParseRetention validates --auto-compaction-mode/--auto-compaction-retention
// the way etcd reads them: "periodic" takes a duration or a number of hours,
// "revision" a number of revisions. Zero disables auto compaction.
func ParseRetention(mode, retention string) (period time.Duration, revs int64, err error) {
	switch mode {
	case "", "periodic":
		if retention == "" {
			return 0, 0, nil
		}
		if h, err := strconv.ParseInt(retention, 10, 64); err == nil {
			return time.Duration(h) * time.Hour, 0, nil
		}
		d, err := time.ParseDuration(retention)
		if err != nil || d < 0 {
			return 0, 0, fmt.Errorf("invalid --auto-compaction-retention %q for mode periodic", retention)
		}
		return d, 0, nil
	case "revision":
		n, err := strconv.ParseInt(retention, 10, 64)
		if err != nil || n < 0 {
			return 0, 0, fmt.Errorf("invalid --auto-compaction-retention %q for mode revision", retention)
		}
		return 0, n, nil
	}
	return 0, 0, fmt.Errorf("invalid --auto-compaction-mode %q (want periodic or revision)", mode)
}

// autoCompact compacts on a schedule. Periodic mode keeps the history of the
// last retention period, sampling the revision every tenth of it (at least
// every second); revision mode keeps the last N revisions, checked every
// 5 minutes as etcd does.
func (s *Server) autoCompact(ctx context.Context) error {
	period, keepRevs, err := ParseRetention(s.cfg.AutoCompactionMode, s.cfg.AutoCompactionRetention)
	if err != nil {
		return err
	}
	if period == 0 && keepRevs == 0 {
		return nil
	}
	step := 5 * time.Minute
	if period > 0 {
		step = period / 10
		if step < time.Second {
			step = time.Second
		}
	}
	type sample struct {
		at  time.Time
		rev int64
	}
	var samples []sample
	t := time.NewTicker(step)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			rev, _, compacted := s.store.Revs()
			var target int64
			if period > 0 {
				samples = append(samples, sample{now, rev})
				for len(samples) > 0 && now.Sub(samples[0].at) >= period {
					target = samples[0].rev
					samples = samples[1:]
				}
			} else {
				target = rev - keepRevs
			}
			if target <= compacted || target <= 0 || !s.Role().Leads() {
				continue // in a pair only the leader compacts (a logged entry)
			}
			_, err := s.propose(ctx, &pb.InternalRaftRequest{Compaction: &pb.CompactionRequest{Revision: target}})
			if err != nil && ctx.Err() == nil {
				s.log.Warn("auto compaction failed", "revision", target, "err", err)
			} else if err == nil {
				s.log.Info("auto compaction", "revision", target)
			}
		}
	}
}
