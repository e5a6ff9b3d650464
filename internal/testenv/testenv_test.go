package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder stands in for a test: it records how Missing ended it instead
// of ending the real test.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper()                        {}
func (r *recorder) Skipf(format string, a ...any)  { r.skipped = fmt.Sprintf(format, a...) }
func (r *recorder) Fatalf(format string, a ...any) { r.failed = fmt.Sprintf(format, a...) }

func TestMissingSkipsUnlessRequired(t *testing.T) {
	for _, tc := range []struct {
		env      string
		wantFail bool
	}{
		{"", false}, {"0", false}, {"1", true}, {"true", true}, {" YES ", true},
	} {
		t.Run(fmt.Sprintf("%q", tc.env), func(t *testing.T) {
			t.Setenv(EnvRequire, tc.env)
			r := &recorder{TB: t}
			Missing(r, "the frobnicator", "install frob")
			got := r.skipped
			if tc.wantFail {
				got = r.failed
			}
			if r.skipped != "" && r.failed != "" {
				t.Fatalf("both skipped (%q) and failed (%q)", r.skipped, r.failed)
			}
			if !strings.HasPrefix(got, Prefix+"the frobnicator; install frob [") {
				t.Fatalf("skipped %q, failed %q; want the message as a %s", r.skipped, r.failed,
					map[bool]string{true: "failure", false: "skip"}[tc.wantFail])
			}
		})
	}
}

func TestNeedCommandAndFile(t *testing.T) {
	t.Setenv(EnvRequire, "1")
	dir := t.TempDir()
	present := filepath.Join(dir, "present")
	if err := os.WriteFile(present, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)

	r := &recorder{TB: t}
	if p := NeedCommand(r, "present", "pkg"); p != present || r.failed != "" {
		t.Fatalf("NeedCommand(present) = %q, failed %q", p, r.failed)
	}
	NeedCommand(r, "absent", "absent-pkg")
	if !strings.Contains(r.failed, "the absent command") || !strings.Contains(r.failed, "install Debian's absent-pkg") {
		t.Fatalf("NeedCommand(absent) failed with %q", r.failed)
	}

	r = &recorder{TB: t}
	NeedFile(r, present, "the present file", "make it")
	if r.failed != "" {
		t.Fatalf("NeedFile(present) failed: %q", r.failed)
	}
	NeedFile(r, filepath.Join(dir, "absent"), "the absent file", "make it")
	if !strings.HasPrefix(r.failed, Prefix+"the absent file (") {
		t.Fatalf("NeedFile(absent) failed with %q", r.failed)
	}
}
