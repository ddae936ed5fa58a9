package checks_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/netcheck"
)

func TestNamesAreUniqueAndInLadderOrderPerFamily(t *testing.T) {
	all := checks.All()
	if len(all) < 13 {
		t.Fatalf("%d checks, want at least the 13 devata had when the registry was made", len(all))
	}
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.Name] {
			t.Errorf("check %s listed twice", e.Name)
		}
		seen[e.Name] = true
		if !slices.Contains(drift.Rungs(), e.Rung) {
			t.Errorf("check %s has rung %q, not one of the ladder's", e.Name, e.Rung)
		}
	}
	if got := checks.Names(); len(got) != len(all) {
		t.Errorf("Names has %d, All %d", len(got), len(all))
	}
	if got, want := checks.Of(checks.FamilyMachine), []string{machines.CheckConfig, machines.CheckTalosVersion, machines.CheckExtensions, machines.CheckMachineStage, machines.CheckKubelet, machines.CheckEtcd}; !slices.Equal(got, want) {
		t.Errorf("machine checks %v, want %v", got, want)
	}
	if slices.Contains(checks.Of(checks.FamilyNet), netcheck.CheckProbe) {
		t.Error("Of lists cilium-probe, which runs only with --probe")
	}
}

// TestExtensionsRunWhatAllLists: the families a pass runs are the ones the
// catalogue lists, optional ones only when asked for.
func TestExtensionsRunWhatAllLists(t *testing.T) {
	inv := &inventory.Inventory{}
	run := func(o checks.Options) []string {
		var names []string
		for _, c := range machines.Checks() {
			names = append(names, c.Name)
		}
		for _, e := range checks.Extensions(inv, o) {
			for _, c := range e.Checks() {
				names = append(names, c.Name)
			}
		}
		return names
	}
	var always []string
	for _, e := range checks.All() {
		if e.Optional == "" {
			always = append(always, e.Name)
		}
	}
	if got := run(checks.Options{}); !slices.Equal(got, always) {
		t.Errorf("a pass runs %v, the catalogue lists %v", got, always)
	}
	if got := run(checks.Options{Probe: &netcheck.ProbeOptions{}}); !slices.Equal(got, checks.Names()) {
		t.Errorf("a pass with the probe runs %v, the catalogue lists %v", got, checks.Names())
	}
}

// TestCatalogueDocumentsEveryCheck: docs/checks*.md has a row per check
// with its rung, and no row for a check that does not exist.
func TestCatalogueDocumentsEveryCheck(t *testing.T) {
	var docs strings.Builder
	for _, f := range []string{"checks.md", "checks-storage.md", "checks-netcheck.md"} {
		b, err := os.ReadFile("../docs/" + f)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
	}
	row := regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)`[^|]*\\| ([a-z]+) \\|")
	rows := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(docs.String(), -1) {
		rows[m[1]] = m[2]
	}
	for _, e := range checks.All() {
		rung, ok := rows[e.Name]
		switch {
		case !ok:
			t.Errorf("docs/checks*.md has no row for check %s", e.Name)
		case rung != string(e.Rung):
			t.Errorf("docs/checks*.md gives %s the rung %s, the check has %s", e.Name, rung, e.Rung)
		}
		delete(rows, e.Name)
	}
	for name := range rows {
		if slices.Contains(drift.Rungs(), drift.Rung(rows[name])) {
			t.Errorf("docs/checks*.md documents check %s, which the registry does not have", name)
		}
	}
}

// TestReportSchemaListsEveryCheck: docs/report.md's result schema names
// every check a result's check field can hold, in the registry's order.
func TestReportSchemaListsEveryCheck(t *testing.T) {
	b, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `check` \\| string \\| check name, one of (.*) \\(\\[catalogue\\]")
	m := row.FindSubmatch(b)
	if m == nil {
		t.Fatal("docs/report.md has no row for the check field that lists the checks")
	}
	var got []string
	for _, n := range regexp.MustCompile("`([a-z0-9-]+)`").FindAllSubmatch(m[1], -1) {
		got = append(got, string(n[1]))
	}
	if want := checks.Names(); !slices.Equal(got, want) {
		t.Errorf("docs/report.md lists checks %v, the registry %v", got, want)
	}
}
