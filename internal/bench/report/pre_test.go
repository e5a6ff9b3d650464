package report

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestOneLine(t *testing.T) {
	long := strings.Repeat("x", 200)
	for _, c := range []struct{ in, want string }{
		{"plain", "plain"},
		{"two\nlines", "two lines"},
		{"a | b", "a / b"},
		{long, long[:160] + "…"},
	} {
		if got := OneLine(c.in); got != c.want {
			t.Errorf("OneLine(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPreHTML(t *testing.T) {
	var b strings.Builder
	err := PreHTML(&b, func(w io.Writer) error {
		_, err := io.WriteString(w, "| a < b |\n")
		return err
	})
	if err != nil || b.String() != "<pre>| a &lt; b |\n</pre>\n" {
		t.Fatalf("PreHTML = %q, %v", b.String(), err)
	}
	fail := errors.New("no table")
	if err := PreHTML(&b, func(io.Writer) error { return fail }); !errors.Is(err, fail) {
		t.Fatalf("PreHTML passed on %v as %v", fail, err)
	}
}
