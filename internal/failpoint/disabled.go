//go:build !failpoints

package failpoint

import "net/http"

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Hit does nothing without the failpoints build tag; the compiler inlines it
// away together with the call site's error check.
func Hit(string) error { return nil }

// Handler is nil without the failpoints build tag: there is nothing to serve.
func Handler() http.Handler { return nil }
