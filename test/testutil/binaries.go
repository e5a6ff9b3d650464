package testutil

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dyad-db/dyad/internal/testenv"
)

// Environment variables understood by this package.
const (
	EnvPeersBin     = "DYAD_PEERS_BIN"
	EnvRequirePeers = testenv.EnvRequire
	EnvDyadBin      = "DYAD_BIN"
	EnvTestTarget   = "DYAD_TEST_TARGET"
	EnvKeepLogs     = "DYAD_KEEP_LOGS"
)

// TargetDyad is the target name that selects dyad in TargetFromEnv and Start.
const TargetDyad = "dyad"

// debianAliases maps names of binaries that come from Debian packages
// (etcd-server, etcd-client: 3.4.23) rather than from scripts/peers.sh.
var debianAliases = map[string]string{
	"etcd-3.4":    "/usr/bin/etcd",
	"etcdctl-3.4": "/usr/bin/etcdctl",
}

// RepoRoot returns the directory holding the go.mod of the module under test,
// found by walking up from the working directory (go test runs each package
// in its own source directory).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("testutil: no go.mod found above the working directory")
		}
		dir = parent
	}
}

// ReadRepoFile returns the file at rel, a slash-separated path below
// RepoRoot, failing the test if it cannot be read.
func ReadRepoFile(t testing.TB, rel string) []byte {
	t.Helper()
	root, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// PeersDir is the directory scripts/peers.sh fills: $DYAD_PEERS_BIN when set,
// else <repo>/.cache/peers/bin.
func PeersDir() (string, error) {
	if d := os.Getenv(EnvPeersBin); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "peers", "bin"), nil
}

// PeersBin returns the path of a reference binary built by scripts/peers.sh
// (etcd-3.6, etcd-3.5, etcdctl, etcdutl, etcdctl-3.5, etcdutl-3.5, benchmark)
// and whether it exists and is executable.
func PeersBin(name string) (string, bool) {
	dir, err := PeersDir()
	if err != nil {
		return "", false
	}
	p := filepath.Join(dir, name)
	return p, isExecutable(p)
}

// ResolveBinary finds a binary by the names the suites use:
//   - a path (anything containing "/") is taken as is;
//   - "etcd-3.4" and "etcdctl-3.4" are Debian's /usr/bin/etcd and /usr/bin/etcdctl;
//   - anything else is looked up with PeersBin.
func ResolveBinary(name string) (string, bool) {
	if strings.Contains(name, "/") {
		return name, isExecutable(name)
	}
	if p, ok := debianAliases[name]; ok {
		return p, isExecutable(p)
	}
	return PeersBin(name)
}

// PeersRequired reports whether DYAD_REQUIRE_PEERS asks for missing binaries
// to be failures rather than skips.
func PeersRequired() bool { return testenv.Required() }

// RequireBinary resolves name with ResolveBinary. When the binary is missing
// the test is skipped, or failed when DYAD_REQUIRE_PEERS=1.
func RequireBinary(t testing.TB, name string) string {
	t.Helper()
	p, ok := ResolveBinary(name)
	if ok {
		return p
	}
	testenv.Missing(t, fmt.Sprintf("binary %q (looked at %s)", name, p),
		fmt.Sprintf("build the reference peers with scripts/peers.sh, point %s at a directory holding them, "+
			"or install Debian's etcd-server/etcd-client for the *-3.4 aliases", EnvPeersBin))
	return ""
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// Builder builds ./cmd/dyad at most once and hands out the binary's path.
// The zero value is ready to use. Call Cleanup (normally via RunMain) to
// remove the temporary directory it built into.
type Builder struct {
	// Tags are build tags (e.g. "failpoints"); EnvBin names the variable
	// holding a prebuilt binary to use instead (default DYAD_BIN).
	Tags   []string
	EnvBin string

	once sync.Once
	dir  string
	path string
	err  error
	skip string // non-empty: there is nothing to build yet
	took time.Duration
}

// Build returns the path of the dyad binary, building it on first use.
// $DYAD_BIN, when set, is used instead of building. A build failure fails
// the test; a tree without cmd/dyad's main package yet skips it.
func (b *Builder) Build(t testing.TB) string {
	t.Helper()
	b.once.Do(b.build)
	if b.skip != "" {
		testenv.Missing(t, b.skip, "")
	}
	if b.err != nil {
		t.Fatalf("building dyad: %v", b.err)
	}
	return b.path
}

// BuildTime is how long the one build took (zero if none ran).
func (b *Builder) BuildTime() time.Duration { return b.took }

func (b *Builder) build() {
	env := b.EnvBin
	if env == "" {
		env = EnvDyadBin
	}
	if p := os.Getenv(env); p != "" {
		if !isExecutable(p) {
			b.err = fmt.Errorf("%s=%s is not an executable file", env, p)
		}
		b.path = p
		return
	}
	root, err := RepoRoot()
	if err != nil {
		b.err = err
		return
	}
	if matches, _ := filepath.Glob(filepath.Join(root, "cmd", "dyad", "*.go")); len(matches) == 0 {
		b.skip = "cmd/dyad has no Go files yet: nothing to test (set " + EnvDyadBin + " to use a prebuilt binary)"
		return
	}
	dir, err := os.MkdirTemp("", "dyad-testbin-")
	if err != nil {
		b.err = err
		return
	}
	b.dir = dir
	b.path = filepath.Join(dir, "dyad")
	start := time.Now()
	args := []string{"build", "-o", b.path}
	if len(b.Tags) > 0 {
		args = append(args, "-tags", strings.Join(b.Tags, ","))
	}
	cmd := exec.Command("go", append(args, "./cmd/dyad")...)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	b.took = time.Since(start)
	if err != nil {
		b.err = fmt.Errorf("go %s ./cmd/dyad: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Cleanup removes the directory the binary was built into.
func (b *Builder) Cleanup() {
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// defaultBuilder backs BuildDyad, failpointsBuilder BuildDyadFailpoints.
// They are the package's only mutable globals: "build once per test binary"
// needs state that outlives any single test, and BuildDyad(t) has no other
// place to keep it. Suites that want explicit ownership can hold their own
// Builder instead.
var (
	defaultBuilder    Builder
	failpointsBuilder = Builder{Tags: []string{"failpoints"}, EnvBin: EnvDyadFailpointsBin}
)

// EnvDyadFailpointsBin names a prebuilt failpoints build of dyad for
// BuildDyadFailpoints.
const EnvDyadFailpointsBin = "DYAD_FAILPOINTS_BIN"

// BuildDyadFailpoints builds ./cmd/dyad with -tags failpoints (see
// internal/failpoint) once per test binary and returns its path.
func BuildDyadFailpoints(t testing.TB) string {
	t.Helper()
	return failpointsBuilder.Build(t)
}

// BuildDyad builds ./cmd/dyad once per test binary and returns its path.
func BuildDyad(t testing.TB) string {
	t.Helper()
	return defaultBuilder.Build(t)
}

// RunMain runs the tests and removes the binary BuildDyad built. Use it as
//
//	func TestMain(m *testing.M) { os.Exit(testutil.RunMain(m)) }
func RunMain(m *testing.M) int {
	code := m.Run()
	defaultBuilder.Cleanup()
	failpointsBuilder.Cleanup()
	return code
}
