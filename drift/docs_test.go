package drift_test

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docBlock returns the first fenced block (```lang) after heading in
// docs/report.md.
func docBlock(t *testing.T, heading, lang string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/report.md has no %q", heading)
	}
	m := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatalf("docs/report.md has no ```%s block under %q", lang, heading)
	}
	return m[1]
}

// inOrder fails unless every line of excerpt appears in golden, in order:
// a shortened example still shows real output, nothing made up.
func inOrder(t *testing.T, what, excerpt, golden string) {
	t.Helper()
	lines := strings.Split(golden, "\n")
	i := 0
	for want := range strings.Lines(excerpt) {
		want = strings.TrimRight(want, "\n")
		for i < len(lines) && lines[i] != want {
			i++
		}
		if i == len(lines) {
			t.Errorf("%s: the line %q is not in the output (in this order); the docs must show what devata prints (drift/testdata holds it)", what, want)
			return
		}
		i++
	}
}

// The examples in docs/report.md are devata's output: each is the golden
// of its format, whole or shortened (issue 17: the docs showed "--- rendered
// / +++ active" and "desired: version 8", which devata never prints).
func TestReportDocsShowTheOutput(t *testing.T) {
	golden := func(name string) string {
		b, err := os.ReadFile("testdata/" + name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got, want := docBlock(t, "## Table (`-o table`)", ""), golden("report.txt"); got != want {
		t.Errorf("docs/report.md's table is not drift/testdata/report.txt:\n%s", got)
	}
	inOrder(t, "docs/report.md's JSON", docBlock(t, "## JSON (`-o json`)", "json"), golden("report.json"))
	inOrder(t, "docs/report.md's textfile", docBlock(t, "## Prometheus textfile (`-o prom`)", ""), golden("report.prom"))
	inOrder(t, "docs/report.md's provenance", docBlock(t, "### `provenance`", "json"), golden("report-provenance.json"))
	inOrder(t, "docs/report.md's inventory series", docBlock(t, "### The inventory's series", ""), golden("report-provenance.prom"))
	inOrder(t, "docs/report.md's inventory line", docBlock(t, "### The inventory line", ""), golden("report-provenance.txt"))
}
