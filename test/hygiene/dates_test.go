package hygiene

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repoRoot is the module root: two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", root, err)
	}
	return root
}

// fixedDates lists every time.Date call in the Go test file src whose line
// does not carry a "fixed date:" comment, as "file:line".
func fixedDates(name string, src []byte) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	excused := map[int]bool{}
	for _, cg := range f.Comments {
		for _, c := range cg.List {
			if strings.Contains(c.Text, "fixed date:") {
				excused[fset.Position(c.Pos()).Line] = true
			}
		}
	}
	timePkg := "time"
	for _, imp := range f.Imports {
		if imp.Path.Value == `"time"` && imp.Name != nil {
			timePkg = imp.Name.Name
		}
	}
	var found []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Date" {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && id.Name == timePkg {
			if line := fset.Position(call.Pos()).Line; !excused[line] {
				found = append(found, fset.Position(call.Pos()).String())
			}
		}
		return true
	})
	return found, nil
}

func TestFixedDatesDetector(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want int
	}{
		{name: "fixed date", src: "package x\nimport \"time\"\nvar t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)\n", want: 1},
		{name: "renamed import", src: "package x\nimport tm \"time\"\nvar t0 = tm.Date(2026, 1, 1, 0, 0, 0, 0, tm.UTC)\n", want: 1},
		{name: "excused on its line", src: "package x\nimport \"time\"\nvar t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // fixed date: codec round trip\n", want: 0},
		{name: "now-based", src: "package x\nimport \"time\"\nvar t0 = time.Now().Add(-time.Hour)\n", want: 0},
		{name: "another package's Date", src: "package x\nimport \"cal\"\nvar d = cal.Date(1)\n", want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := fixedDates("x_test.go", []byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.want {
				t.Fatalf("found %v, want %d", got, tc.want)
			}
		})
	}
}

// TestNoFixedDatesInTests walks every _test.go file of the module.
func TestNoFixedDatesInTests(t *testing.T) {
	root := repoRoot(t)
	files := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		files++
		found, err := fixedDates(path, src)
		if err != nil {
			return err
		}
		for _, at := range found {
			rel, _ := filepath.Rel(root, at)
			t.Errorf("%s: time.Date in a test: take times from one now or an injected clock (or say why with a `fixed date:` comment)", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("walked only %d test files under %s; the walk is broken", files, root)
	}
}
