package failpoint

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The failpoints. See the package documentation for where each one is.
const (
	BeforeCommit          = "before-commit"
	AfterCommit           = "after-commit"
	BeforeAck             = "before-ack"
	AfterAck              = "after-ack"
	BeforeRelease         = "before-release"
	CatchupApply          = "catchup-apply"
	CatchupServe          = "catchup-serve"
	SnapshotBeforeInstall = "snapshot-before-install"
	SnapshotAfterInstall  = "snapshot-after-install"
	TruncateSuffix        = "truncate-suffix"
)

// Names lists every failpoint, sorted.
func Names() []string {
	n := []string{BeforeCommit, AfterCommit, BeforeAck, AfterAck, BeforeRelease,
		CatchupApply, CatchupServe, SnapshotBeforeInstall, SnapshotAfterInstall, TruncateSuffix}
	slices.Sort(n)
	return n
}

// Known reports whether name is a failpoint.
func Known(name string) bool { return slices.Contains(Names(), name) }

// EnvVar names the environment variable read at start by a failpoints
// build: "name=term" pairs separated by ";".
const EnvVar = "DYAD_FAILPOINTS"

// ErrInjected is wrapped by every error an "error" action returns.
var ErrInjected = errors.New("failpoint: injected error")

// Kind is what an armed failpoint does.
type Kind int

const (
	Off Kind = iota
	Crash
	Sleep
	Error
)

func (k Kind) String() string {
	switch k {
	case Off:
		return "off"
	case Crash:
		return "crash"
	case Sleep:
		return "sleep"
	case Error:
		return "error"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// Term is a parsed failpoint term: [P%][N*]action.
type Term struct {
	Kind    Kind
	Sleep   time.Duration // Sleep
	Message string        // Error
	// Count is how many times the term fires before it disarms; 0 is
	// unlimited.
	Count int
	// Percent is the probability of firing on a hit, in (0, 100]; 0 means
	// 100 (always).
	Percent float64
}

// String renders t in the syntax Parse reads.
func (t Term) String() string {
	var b strings.Builder
	if t.Percent > 0 && t.Percent < 100 {
		b.WriteString(strconv.FormatFloat(t.Percent, 'f', -1, 64) + "%")
	}
	if t.Count > 0 {
		b.WriteString(strconv.Itoa(t.Count) + "*")
	}
	switch t.Kind {
	case Sleep:
		b.WriteString("sleep(" + t.Sleep.String() + ")")
	case Error:
		b.WriteString("error(" + t.Message + ")")
	default:
		b.WriteString(t.Kind.String())
	}
	return b.String()
}

// Err is the error an Error term returns.
func (t Term) Err(name string) error {
	return fmt.Errorf("%w at %s: %s", ErrInjected, name, t.Message)
}

// Parse reads a term: [P%][N*]action, where action is off, crash,
// sleep(DURATION) (Go syntax: 50ms, 2s) or error(MESSAGE) (MESSAGE may be
// empty; it is "injected" then).
func Parse(s string) (Term, error) {
	var t Term
	rest := strings.TrimSpace(s)
	if i := strings.IndexByte(rest, '%'); i >= 0 && !strings.Contains(rest[:i], "(") {
		p, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil || p <= 0 || p > 100 {
			return Term{}, fmt.Errorf("failpoint term %q: probability %q is not in (0, 100]", s, rest[:i])
		}
		t.Percent, rest = p, rest[i+1:]
	}
	if i := strings.IndexByte(rest, '*'); i >= 0 && !strings.Contains(rest[:i], "(") {
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n <= 0 {
			return Term{}, fmt.Errorf("failpoint term %q: count %q is not a positive integer", s, rest[:i])
		}
		t.Count, rest = n, rest[i+1:]
	}
	name, arg, hasArg := rest, "", false
	if i := strings.IndexByte(rest, '('); i >= 0 {
		if !strings.HasSuffix(rest, ")") {
			return Term{}, fmt.Errorf("failpoint term %q: unbalanced parenthesis", s)
		}
		name, arg, hasArg = rest[:i], rest[i+1:len(rest)-1], true
	}
	switch name {
	case "off", "crash":
		if hasArg {
			return Term{}, fmt.Errorf("failpoint term %q: %s takes no argument", s, name)
		}
		t.Kind = Off
		if name == "crash" {
			t.Kind = Crash
		}
	case "sleep":
		d, err := time.ParseDuration(arg)
		if !hasArg || err != nil || d < 0 {
			return Term{}, fmt.Errorf("failpoint term %q: sleep needs a duration, as in sleep(50ms)", s)
		}
		t.Kind, t.Sleep = Sleep, d
	case "error":
		t.Kind, t.Message = Error, arg
		if t.Message == "" {
			t.Message = "injected"
		}
	default:
		return Term{}, fmt.Errorf("failpoint term %q: unknown action %q (want off, crash, sleep(D) or error(MSG))", s, name)
	}
	return t, nil
}

// ParseList reads "name=term;name=term" (the format of EnvVar). Unknown
// names are errors; a later term for the same name wins.
func ParseList(s string) (map[string]Term, error) {
	m := map[string]Term{}
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, spec, ok := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		if !ok {
			return nil, fmt.Errorf("failpoint %q: want name=term", part)
		}
		if !Known(name) {
			return nil, fmt.Errorf("failpoint %q: unknown (known: %s)", name, strings.Join(Names(), ", "))
		}
		t, err := Parse(spec)
		if err != nil {
			return nil, err
		}
		m[name] = t
	}
	return m, nil
}
