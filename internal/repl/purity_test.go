package repl

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// forbiddenImports are packages the protocol core must not use: I/O, the
// network, randomness, locks and the storage and DDS layers belong to the
// driver. A path ending in "/" forbids every package below it too.
var forbiddenImports = []string{
	"os", "os/", "net", "net/", "io/fs", "syscall",
	"math/rand", "math/rand/", "crypto/rand",
	"sync", "sync/", "unsafe", "runtime",
	"go.etcd.io/bbolt",
	"github.com/dyad-db/dyad/internal/storage",
	"github.com/dyad-db/dyad/internal/dds",
	"github.com/dyad-db/dyad/internal/transport",
	"github.com/dyad-db/dyad/internal/server",
	"github.com/dyad-db/dyad/internal/repl/replstore",
}

// allowedTime are the only names of package time the core may use: the
// Duration type and its unit constants. Everything else reads a clock or
// starts a timer.
var allowedTime = map[string]bool{
	"Duration": true, "Nanosecond": true, "Microsecond": true,
	"Millisecond": true, "Second": true, "Minute": true, "Hour": true,
}

func forbidden(path string) bool {
	for _, f := range forbiddenImports {
		if path == f || strings.HasSuffix(f, "/") && strings.HasPrefix(path, f) {
			return true
		}
	}
	return false
}

// TestPurity parses the package's non-test files and fails on an import of
// I/O, network, randomness, storage or DDS code, on any use of package
// time beyond Duration arithmetic, and on a go statement: the core is a
// deterministic state machine driven by its caller (doc.go).
func TestPurity(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, v := range impurities(fset, f) {
			t.Error(v)
		}
	}
	if checked == 0 {
		t.Fatal("no source file checked")
	}
}

// impurities lists what makes f impure, each with its position.
func impurities(fset *token.FileSet, f *ast.File) []string {
	var out []string
	timeName := ""
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		if forbidden(path) {
			out = append(out, fset.Position(imp.Pos()).String()+": imports "+path)
		}
		if path == "time" {
			timeName = "time"
			if imp.Name != nil {
				timeName = imp.Name.Name
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			out = append(out, fset.Position(n.Pos()).String()+": go statement")
		case *ast.SelectorExpr:
			if id, ok := n.X.(*ast.Ident); ok && timeName != "" && id.Name == timeName && !allowedTime[n.Sel.Name] {
				out = append(out, fset.Position(n.Pos()).String()+": uses time."+n.Sel.Name)
			}
		}
		return true
	})
	return out
}

// TestPurityCatches: the check finds each kind of impurity in a sample
// source (so that TestPurity passing means something).
func TestPurityCatches(t *testing.T) {
	tests := []struct {
		name, src string
		want      int
	}{
		{"pure", "package p\nimport \"time\"\nvar d = 3 * time.Second\nfunc f(x time.Duration) time.Duration { return x / 4 }\n", 0},
		{"clock", "package p\nimport \"time\"\nfunc f() int64 { return time.Now().UnixNano() }\n", 1},
		{"renamed time", "package p\nimport tm \"time\"\nfunc f() { tm.Sleep(1) }\n", 1},
		{"timer", "package p\nimport \"time\"\nvar c = time.After(time.Second)\n", 1},
		{"io", "package p\nimport \"os\"\nvar _ = os.Args\n", 1},
		{"network", "package p\nimport \"net/netip\"\nvar _ netip.Addr\n", 1},
		{"randomness", "package p\nimport \"math/rand/v2\"\nvar _ = rand.Uint64\n", 1},
		{"storage", "package p\nimport \"github.com/dyad-db/dyad/internal/storage\"\nvar _ storage.ReadTx\n", 1},
		{"bbolt", "package p\nimport bolt \"go.etcd.io/bbolt\"\nvar _ *bolt.DB\n", 1},
		{"dds", "package p\nimport \"github.com/dyad-db/dyad/internal/dds\"\nvar _ dds.Config\n", 1},
		{"goroutine", "package p\nfunc f() { go func() {}() }\n", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "sample.go", tt.src, 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := impurities(fset, f); len(got) != tt.want {
				t.Fatalf("found %q, want %d impurities", got, tt.want)
			}
		})
	}
}
