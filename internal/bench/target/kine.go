package target

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/dyad-db/dyad/internal/bench/proc"
)

// kineSQLiteParams is kine's own default SQLite DSN (its README): WAL with
// synchronous=NORMAL, so a commit is not fsynced; that is what k3s users
// get, and the report says so.
const kineSQLiteParams = "?_journal_mode=WAL&_busy_timeout=30000&_synchronous=NORMAL&_txlock=immediate&_stmt_cache_size=20&cache=shared"

// kine is k3s' etcd shim over SQLite or over a private PostgreSQL.
type kine struct {
	env     Env
	pg      bool
	bin     string
	pgBin   string
	g       *group
	db      *postgres
	version string
}

func newKine(env Env, pg bool) (*kine, error) {
	bin, err := env.Bins.peer("kine")
	if err != nil {
		return nil, err
	}
	k := &kine{env: env, pg: pg, bin: bin}
	if pg {
		if k.pgBin, err = pgBinDir(env.Bins.PGBinDir); err != nil {
			return nil, err
		}
	}
	return k, nil
}

func (k *kine) Name() string {
	if k.pg {
		return "kine-pg"
	}
	return "kine-sqlite"
}

func (k *kine) Version() string { return k.version }

func (k *kine) Start(ctx context.Context) ([]string, error) {
	g, err := newGroup(k.env.WorkDir, k.Name())
	if err != nil {
		return nil, err
	}
	k.g = g
	kv := "kine " + moduleVersion(k.bin, "")
	endpoint := "sqlite://" + filepath.Join(g.dir, "state.db") + kineSQLiteParams
	k.version = kv + " on SQLite (synchronous=NORMAL)"
	if k.pg {
		if k.db, err = startPostgres(ctx, g, k.pgBin); err != nil {
			return nil, errors.Join(fmt.Errorf("kine-pg: %w", err), k.Stop())
		}
		endpoint = k.db.dsn()
		k.version = kv + " on " + strings.Replace(k.db.version, "postgres (PostgreSQL)", "PostgreSQL", 1)
	}
	ports, err := proc.FreePorts(1)
	if err != nil {
		return nil, errors.Join(err, k.Stop())
	}
	ep := fmt.Sprintf("127.0.0.1:%d", ports[0])
	_, err = g.start("kine", proc.Spec{Bin: k.bin, Args: []string{
		"--listen-address", ep, "--endpoint", endpoint, "--metrics-bind-address", "0"}})
	if err == nil {
		err = waitServing(ctx, []string{ep}, g.failed)
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", k.Name(), err), k.Stop())
	}
	return []string{ep}, nil
}

func (k *kine) Stop() error {
	var err error
	if k.g != nil {
		err = k.g.stop() // kine, then postgres (reverse start order)
	}
	if k.db != nil {
		k.db.stop() // the server is already stopped; removes its directory
		k.db = nil
	}
	return err
}
