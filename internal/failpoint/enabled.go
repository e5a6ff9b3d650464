//go:build failpoints

package failpoint

import (
	"fmt"
	"net/http"
	"os"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

// process is the failpoints build's registry (see the package
// documentation for why it is process-wide).
var process = func() *Registry {
	r := NewRegistry()
	if s := os.Getenv(EnvVar); s != "" {
		if err := r.ArmList(s); err != nil {
			// A mistyped failpoint would make a test prove nothing.
			fmt.Fprintf(os.Stderr, "dyad: %s: %v\n", EnvVar, err)
			os.Exit(2)
		}
	}
	return r
}()

// Hit runs the term armed at name, if any (see Registry.Hit).
func Hit(name string) error { return process.Hit(name) }

// Handler serves the process's failpoints over HTTP (see Registry.Handler).
func Handler() http.Handler { return process.Handler() }
