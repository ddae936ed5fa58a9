package checks_test

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/checks"
	"devata.dev/devata/checks/probe"
	"devata.dev/devata/drift"
	"devata.dev/devata/machines"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/storagecheck"
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
	// each family's checks, in its own list's order, always-run ones first
	for f, list := range map[checks.Family][]drift.Info{
		checks.FamilyMachine: drift.Infos(machines.Checks()),
		checks.FamilyStorage: drift.Infos(storagecheck.Checks()),
		checks.FamilyNet:     drift.Infos(netcheck.Checks(netcheck.Options{})),
	} {
		var want []string
		for _, i := range list {
			want = append(want, i.Name)
		}
		if got := checks.Of(f); !slices.Equal(got, want) {
			t.Errorf("family %s: %v, its Checks list %v", f, got, want)
		}
	}
	if slices.Contains(checks.Of(checks.FamilyNet), netcheck.CheckProbe) {
		t.Error("Of lists cilium-probe, which runs only with --probe")
	}
}

// TestFamiliesRunWhatAllLists: the families a pass runs are the ones the
// catalogue lists, optional ones only when asked for.
func TestFamiliesRunWhatAllLists(t *testing.T) {
	run := func(o checks.Options) []string {
		var names []string
		for _, c := range append(machines.Checks(), checks.Families(o)...) {
			names = append(names, c.Name)
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
	if got := run(checks.Options{Probe: &probe.Options{}}); !slices.Equal(got, checks.Names()) {
		t.Errorf("a pass with the probe runs %v, the catalogue lists %v", got, checks.Names())
	}
}

// TestCatalogueDocumentsEveryCheck: docs/checks*.md has a row per check
// with its rung, and no row for a check that does not exist.
func TestCatalogueDocumentsEveryCheck(t *testing.T) {
	for _, p := range catalogueProblems(t, checks.All()) {
		t.Error(p)
	}
}

// catalogueProblems is what docs/checks*.md lacks or has too much for reg.
func catalogueProblems(t *testing.T, reg checks.Registry) []string {
	t.Helper()
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
	var out []string
	for _, e := range reg {
		rung, ok := rows[e.Name]
		switch {
		case !ok:
			out = append(out, "docs/checks*.md has no row for check "+e.Name)
		case rung != string(e.Rung):
			out = append(out, "docs/checks*.md gives "+e.Name+" the rung "+rung+", the check has "+string(e.Rung))
		}
		delete(rows, e.Name)
	}
	for name := range rows {
		if slices.Contains(drift.Rungs(), drift.Rung(rows[name])) {
			out = append(out, "docs/checks*.md documents check "+name+", which the registry does not have")
		}
	}
	return out
}

// TestReportSchemaTakesItsChecksFromTheCatalogue: docs/report.md's result
// schema says a check field holds a name the catalogue lists, and lists
// none itself (a list there would be one more place to add a check).
func TestReportSchemaTakesItsChecksFromTheCatalogue(t *testing.T) {
	for _, p := range reportSchemaProblems(t, checks.All()) {
		t.Error(p)
	}
}

// reportSchemaProblems is why docs/report.md's check row would not hold
// every check of reg.
func reportSchemaProblems(t *testing.T, reg checks.Registry) []string {
	t.Helper()
	b, err := os.ReadFile("../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?m)^\\| `check` \\| string \\| (.*) \\|$").FindSubmatch(b)
	if m == nil {
		return []string{"docs/report.md has no row for the check field"}
	}
	var out []string
	if !strings.Contains(string(m[1]), "[catalogue](checks.md)") {
		out = append(out, "docs/report.md's check row does not point to the catalogue, which lists every check")
	}
	for _, n := range regexp.MustCompile("`([a-z0-9-]+)`").FindAllSubmatch(m[1], -1) {
		if _, ok := reg.Get(string(n[1])); ok {
			out = append(out, "docs/report.md's check row lists "+string(n[1])+" by hand: the catalogue lists the checks")
		}
	}
	return out
}

// TestThrowawayCheckReachesTheCatalogueCheck: a check added to a copy of
// the registry alone is validated by --checks, must be documented in the
// catalogue (which the report schema's check field refers to), and leaks
// to no other registry.
func TestThrowawayCheckReachesTheCatalogueCheck(t *testing.T) {
	throwaway := checks.Entry{Info: drift.Info{Name: "throwaway-check", Rung: drift.RungResources}, Family: checks.FamilyMachine}
	reg := checks.All().With(throwaway)
	if err := reg.Validate([]string{"config", "throwaway-check"}); err != nil {
		t.Errorf("--checks refuses the throwaway check: %v", err)
	}
	if err := checks.All().Validate([]string{"throwaway-check"}); err == nil {
		t.Error("the throwaway check leaked into checks.All()")
	}
	if got := reg.Names(); got[len(got)-1] != "throwaway-check" {
		t.Errorf("Names ends with %s", got[len(got)-1])
	}
	if got := catalogueProblems(t, reg); !slices.Equal(got, []string{"docs/checks*.md has no row for check throwaway-check"}) {
		t.Errorf("the catalogue check says %q, want only that throwaway-check has no row", got)
	}
	if got := reportSchemaProblems(t, reg); len(got) > 0 {
		t.Errorf("the report schema would not hold the throwaway check: %q", got)
	}
}

// Validate names the nearest check and every check there is.
func TestValidateSaysWhatThereIs(t *testing.T) {
	err := checks.All().Validate([]string{"config", "kubelt"})
	if err == nil || !strings.Contains(err.Error(), `--checks: no check "kubelt"; did you mean "kubelet"? (have config, talos-version,`) {
		t.Errorf("%v", err)
	}
}
