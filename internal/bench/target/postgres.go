package target

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/dyad-db/dyad/internal/bench/proc"
)

// postgres is a private PostgreSQL cluster: initdb into a fresh directory,
// then the postmaster itself as a child process on a loopback port with
// trust authentication and default durability (fsync on).
//
// The postmaster is run directly rather than through pg_ctl: pg_ctl
// daemonizes the server, and the bench would then no longer own the process
// (no Pdeathsig, no reaping). PostgreSQL refuses to run as root ("root"
// execution of the PostgreSQL server is not permitted), so when the bench is
// root it runs initdb and the server as Debian's "postgres" user, in a data
// directory that user owns.
type postgres struct {
	binDir  string
	dir     string // owned by the server's user; removed by stop
	cred    *syscall.Credential
	srv     *proc.Proc
	port    int
	version string
}

// pgBinDir returns the given dir or Debian's newest /usr/lib/postgresql/*/bin.
func pgBinDir(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return pgMajor(dirs[i]) > pgMajor(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("PostgreSQL not found under /usr/lib/postgresql (apt-get install postgresql; scripts/setup.sh does)")
}

func pgMajor(binDir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return n
}

// startPostgres initialises and starts a cluster whose log goes to g's dir.
func startPostgres(ctx context.Context, g *group, binDir string) (*postgres, error) {
	pg := &postgres{binDir: binDir}
	// Not under g.dir: the bench's work dir may be private to root, and the
	// server's user must be able to reach its data directory.
	dir, err := os.MkdirTemp("", "dyad-bench-pg-")
	if err != nil {
		return nil, err
	}
	pg.dir = dir
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			pg.stop()
			return nil, fmt.Errorf("running as root and there is no postgres user to run PostgreSQL as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		pg.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			pg.stop()
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), "-D", data, "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: pg.cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		pg.stop()
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	ports, err := proc.FreePorts(1)
	if err != nil {
		pg.stop()
		return nil, err
	}
	pg.port = ports[0]
	pg.srv, err = g.start("postgres", proc.Spec{Bin: filepath.Join(binDir, "postgres"), Cred: pg.cred, Args: []string{
		"-D", data, "-p", strconv.Itoa(pg.port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + dir, "-c", "max_connections=300"}})
	if err == nil {
		err = pg.waitReady(ctx, g)
	}
	if err != nil {
		pg.stop()
		return nil, err
	}
	if v, err := proc.Output(filepath.Join(binDir, "postgres"), "--version"); err == nil {
		pg.version = v
	}
	return pg, nil
}

func (pg *postgres) waitReady(ctx context.Context, g *group) error {
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	for {
		if err := g.failed(); err != nil {
			return err
		}
		err := exec.CommandContext(ctx, filepath.Join(pg.binDir, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(pg.port)).Run()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dsn is kine's endpoint for this cluster (kine creates the database).
func (pg *postgres) dsn() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/kine?sslmode=disable", pg.port)
}

// stop removes the data directory; the server itself is stopped by the
// group that started it (after kine, which the group started later).
func (pg *postgres) stop() {
	if pg.srv != nil {
		// SIGTERM is PostgreSQL's "smart" shutdown, which waits for
		// clients; kine is already gone when this runs.
		_ = pg.srv.Stop(stopGrace)
	}
	os.RemoveAll(pg.dir)
}
