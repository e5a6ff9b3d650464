package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// EnvRequire names the variable that turns a missing prerequisite from a
// skip into a failure.
const EnvRequire = "DYAD_REQUIRE_PEERS"

// Prefix starts every message Missing writes.
const Prefix = "missing prerequisite: "

// Required reports whether $DYAD_REQUIRE_PEERS asks for missing
// prerequisites to fail their tests ("1", "true" or "yes").
func Required() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvRequire)))
	return v == "1" || v == "true" || v == "yes"
}

// Missing ends the test because what is not available: a skip, or a
// failure when Required. install says how to provide it (empty when what
// already says so).
func Missing(t testing.TB, what, install string) {
	t.Helper()
	msg := Prefix + what
	if install != "" {
		msg += "; " + install
	}
	if Required() {
		t.Fatalf("%s [%s=1 makes this a failure]", msg, EnvRequire)
		return // unreachable with a real test; keeps a stand-in TB honest
	}
	t.Skipf("%s [set %s=1 to make this a failure]", msg, EnvRequire)
}

// NeedRoot ends the test (Missing) unless it runs as root; why says what
// root is needed for.
func NeedRoot(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root, "+why, "run the tests as root (scripts/test.sh does)")
	}
}

// NeedCommand returns the path of the command name, or ends the test
// (Missing) naming the Debian package that provides it.
func NeedCommand(t testing.TB, name, debianPackage string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		Missing(t, fmt.Sprintf("the %s command (%v)", name, err),
			fmt.Sprintf("install Debian's %s (scripts/setup.sh does)", debianPackage))
	}
	return p
}

// NeedFile ends the test (Missing) unless path exists; what names the
// thing the file stands for and install how to get it.
func NeedFile(t testing.TB, path, what, install string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		Missing(t, fmt.Sprintf("%s (%v)", what, err), install)
	}
}
