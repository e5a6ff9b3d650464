package robustness

import (
	"strings"
	"testing"
)

// TestSelectScenarios: DYAD_ROBUSTNESS picks rows by name, "ci" (or
// nothing) every row without an open bug, "all" every row; a name the
// table lacks is an error that names it, never a run with no fault.
func TestSelectScenarios(t *testing.T) {
	for _, sel := range []string{"", "ci", " ci ", "all"} {
		got, err := selectScenarios(sel)
		if err != nil {
			t.Fatalf("%q: %v", sel, err)
		}
		for _, row := range scenarios {
			want := strings.TrimSpace(sel) == "all" || row.bug == ""
			if got[row.name] != want {
				t.Errorf("%q: row %s selected %v, want %v (bug %q)", sel, row.name, got[row.name], want, row.bug)
			}
		}
		if len(got) > len(scenarios) {
			t.Errorf("%q: %d rows selected of %d", sel, len(got), len(scenarios))
		}
	}

	first, last := scenarios[0].name, scenarios[len(scenarios)-1].name
	got, err := selectScenarios(first + " , " + last + ",")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || !got[first] || !got[last] {
		t.Fatalf("selected %v, want exactly %s and %s", got, first, last)
	}

	typo := first[:len(first)-1] // "kill-primar": not a row
	for _, sel := range []string{typo, first + "," + typo} {
		if got, err := selectScenarios(sel); err == nil || !strings.Contains(err.Error(), `"`+typo+`"`) {
			t.Errorf("%q: selected %v, err %v; want an error naming %q", sel, got, err, typo)
		}
	}
	if got, err := selectScenarios(" , "); err == nil {
		t.Errorf(`" , ": selected %v, want an error (nothing selected)`, got)
	}
}
