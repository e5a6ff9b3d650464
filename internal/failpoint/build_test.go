package failpoint

import "testing"

// The package-level functions match the build: without the failpoints tag
// nothing is armed even when the environment asks, and there is no handler.
func TestBuildVariant(t *testing.T) {
	t.Setenv(EnvVar, "before-commit=error(x)")
	err := Hit(BeforeCommit)
	if Enabled {
		if Handler() == nil {
			t.Error("failpoints build without a handler")
		}
		return // the process registry read the environment before the test set it
	}
	if err != nil {
		t.Errorf("a default build's Hit returned %v", err)
	}
	if Handler() != nil {
		t.Error("a default build serves failpoints")
	}
}
