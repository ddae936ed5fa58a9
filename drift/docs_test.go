package drift_test

import (
	"maps"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/provenance"
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

// docFields are the fields docs/report.md's table under heading names, with
// the "omitempty" its type column says.
func docFields(t *testing.T, heading string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n"+heading+"\n")
	if !ok {
		t.Fatalf("docs/report.md has no %q", heading)
	}
	section, _, _ = strings.Cut(section, "\n#")
	fields := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z0-9]+)` \\| ([^|]*)\\|").FindAllStringSubmatch(section, -1) {
		fields[m[1]] = strings.Contains(m[2], "omitempty")
	}
	return fields
}

// typeFields are the JSON fields of a type, embedded structs flattened,
// with whether each is omitted when empty (omitempty or omitzero).
func typeFields(typ reflect.Type) map[string]bool {
	fields := map[string]bool{}
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if f.Anonymous && tag == "" {
			maps.Copy(fields, typeFields(f.Type))
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		fields[name] = strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
	}
	return fields
}

// Every field of the JSON report is in docs/report.md's tables, each table
// row is a field devata writes, and "omitempty" is said where it holds
// (issue 33: docs/report.md is checked against drift/json.go).
func TestReportDocsNameEveryJSONField(t *testing.T) {
	for heading, typ := range map[string]reflect.Type{
		"### Top level":    reflect.TypeFor[drift.Report](),
		"### `result`":     reflect.TypeFor[drift.Result](),
		"### `machine`":    reflect.TypeFor[drift.MachineSummary](),
		"### `summary`":    reflect.TypeFor[drift.Summary](),
		"### `counts`":     reflect.TypeFor[drift.Counts](),
		"### `provenance`": reflect.TypeFor[provenance.Info](),
	} {
		docs, code := docFields(t, heading), typeFields(typ)
		for name, omit := range code {
			if d, ok := docs[name]; !ok {
				t.Errorf("%s: docs/report.md has no row for %q", heading, name)
			} else if d != omit {
				t.Errorf("%s: %q: docs say omitempty %v, the code %v", heading, name, d, omit)
			}
		}
		for name := range docs {
			if _, ok := code[name]; !ok {
				t.Errorf("%s: docs/report.md documents %q, which %s does not have", heading, name, typ)
			}
		}
	}
}

// machines[].address is the address devata dialled (a dial setting's
// override, such as the sim's loopback address, else the inventory's
// address and port), and the docs say so (issue 33: they said the
// inventory's address).
func TestReportDocsSayTheAddressIsTheOneDialled(t *testing.T) {
	b, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `address` \\|.*$").FindString(string(b))
	if !strings.Contains(row, "dialled") || strings.Contains(row, "address from the inventory |") {
		t.Errorf("docs/report.md's address row: %q", row)
	}
}
