package report

import (
	"fmt"
	"html/template"
	"io"
	"strings"
)

// PreHTML writes what md writes as one escaped <pre> block: the HTML form
// of a section that is a Markdown table, so that the page and summary.md
// cannot disagree.
func PreHTML(w io.Writer, md func(io.Writer) error) error {
	var b strings.Builder
	if err := md(&b); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "<pre>%s</pre>\n", template.HTMLEscapeString(b.String()))
	return err
}

// OneLine makes s fit one Markdown table cell: newlines become spaces,
// pipes slashes, and it is cut at 160 bytes.
func OneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}
