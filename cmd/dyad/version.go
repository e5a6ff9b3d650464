package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dyad-db/dyad/internal/repl"
	"github.com/dyad-db/dyad/internal/server"
)

// Version is dyad's own release version.
const Version = "0.1.0"

// stampedCommit and stampedModified are set by `make release` through
// -ldflags -X, because release builds run with -buildvcs=false wherever
// GOFLAGS says so (and from a source tarball with no .git). They are
// package variables only because the linker can set nothing else; nothing
// assigns them at run time.
var (
	stampedCommit   string
	stampedModified string
)

// buildInfo is what `dyad version` and `dyad --version` print.
type buildInfo struct {
	Version       string // dyad's release version
	ModuleVersion string // the main module's version as the go command stamped it, "(devel)" for a plain build
	Commit        string // VCS revision, empty when unknown
	Modified      bool   // built from a tree with uncommitted changes
	GoVersion     string
}

// readBuildInfo takes the commit from the linker stamp when there is one,
// else from the VCS settings the go command records (go build -buildvcs).
func readBuildInfo() buildInfo {
	b := buildInfo{Version: Version, ModuleVersion: "(unknown)", GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		b.ModuleVersion = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Commit = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	if stampedCommit != "" {
		b.Commit, b.Modified = stampedCommit, stampedModified == "true"
	}
	return b
}

// commitString is the commit as printed: the revision, "+dirty" for a
// modified tree, "unknown" without one.
func (b buildInfo) commitString() string {
	if b.Commit == "" {
		return "unknown"
	}
	if b.Modified {
		return b.Commit + "+dirty"
	}
	return b.Commit
}

// Short is the release name: version plus the commit's first 12 digits.
func (b buildInfo) Short() string {
	if b.Commit == "" {
		return b.Version
	}
	c := b.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	if b.Modified {
		c += ".dirty"
	}
	return b.Version + "+" + c
}

// write prints the lines etcd's --version prints, plus dyad's own.
func (b buildInfo) write(w io.Writer) {
	var sb strings.Builder
	fmt.Fprintf(&sb, "dyad Version: %s\n", b.Version)
	fmt.Fprintf(&sb, "Git SHA: %s\n", b.commitString())
	fmt.Fprintf(&sb, "Module Version: %s\n", b.ModuleVersion)
	fmt.Fprintf(&sb, "etcd API Version: %s\n", server.EtcdVersion)
	fmt.Fprintf(&sb, "Replication Protocol Versions: %s\n", repl.Supported())
	fmt.Fprintf(&sb, "Go Version: %s\n", b.GoVersion)
	fmt.Fprintf(&sb, "Go OS/Arch: %s/%s\n", runtime.GOOS, runtime.GOARCH)
	io.WriteString(w, sb.String())
}

func versionCmd() *cobra.Command {
	var short bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print dyad's version, commit and the etcd API version it reports",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			b := readBuildInfo()
			if short {
				fmt.Fprintln(cmd.OutOrStdout(), b.Short())
				return
			}
			b.write(cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVar(&short, "short", false, "Print only the release name: VERSION+COMMIT (used by make release).")
	return cmd
}
