package layers_test

import (
	"errors"
	"go/build"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const module = "devata.dev/devata/"

// allowed is the import graph: each package and the devata packages its
// non-test files may import. Reading down the list is reading down the
// layers; a package may only import packages listed before it. A new
// package must be added here, in its place (docs/architecture.md).
var allowed = []struct {
	pkg     string
	imports []string
}{
	// leaves
	{"redact", nil},
	{"provenance", nil},
	{"internal/outfile", nil},
	{"internal/termsafe", nil},
	{"drift", []string{"internal/outfile", "internal/termsafe", "provenance"}},
	{"config", nil},
	{"lock", nil},
	{"snapshot", nil},
	{"examples", nil},
	{"deploy", nil},
	{"internal/configview", nil},
	{"internal/talos", nil},
	{"sim", []string{"internal/configview", "internal/talos"}},
	{"internal/testenv", nil},
	{"internal/testctx", nil},
	{"internal/golden", nil},
	{"internal/snapshottest", nil},
	{"internal/layers", nil},
	{"internal/heartbeat", nil},
	{"internal/drain", []string{"internal/heartbeat"}},
	// the spec and what is rendered from it
	{"inventory", []string{"internal/talos", "redact"}},
	{"render", []string{"internal/configview", "internal/outfile", "internal/talos", "inventory", "redact"}},
	// the one shape of a plan (steps, their writers, the step line): above
	// the spec, whose patch layers it prints, and drift, whose rungs its
	// evidence names; below every planner (bootstrap, reconcile,
	// membership) and the demo, which all speak it
	{"plan", []string{"drift", "inventory", "provenance"}},
	// the Talos API and the checks of what it reports
	{"talosapi", []string{"internal/configview", "inventory", "redact"}},
	// the one target every check receives: a machine, its Talos
	// connection and observation, the Kubernetes client and its observation
	{"checks/target", []string{"inventory", "talosapi"}},
	// the transaction rung's pods (created pinned to a node, awaited,
	// always deleted), which the families' probe checks run
	{"checks/probe", nil},
	{"machines", []string{"checks/target", "drift", "internal/talos", "inventory", "redact", "talosapi"}},
	{"gate", []string{"internal/heartbeat", "inventory", "talosapi"}},
	{"netcheck", []string{"checks/probe", "checks/target", "drift", "internal/configview", "inventory", "talosapi"}},
	{"storagecheck", []string{"checks/target", "drift", "inventory", "talosapi"}},
	{"certcheck", []string{"checks/target", "drift", "talosapi"}},
	{"dnscheck", []string{"checks/probe", "checks/target", "drift", "inventory"}},
	// the one list of checks
	{"checks", []string{"certcheck", "checks/probe", "checks/target", "dnscheck", "drift", "inventory", "machines", "netcheck", "storagecheck", "talosapi"}},
	// what changes machines
	{"reconcile", []string{"render", "checks", "checks/target", "drift", "gate", "internal/drain", "internal/heartbeat", "internal/talos", "inventory", "machines", "plan", "provenance", "talosapi"}},
	{"bootstrap", []string{"render", "checks", "drift", "gate", "internal/heartbeat", "internal/talos", "inventory", "machines", "plan", "provenance", "snapshot", "talosapi"}},
	{"backup/store", []string{"redact"}},
	{"backup", []string{"backup/store", "gate", "internal/outfile", "inventory", "provenance", "snapshot", "talosapi"}},
	{"membership", []string{"gate", "internal/configview", "internal/drain", "internal/heartbeat", "inventory", "plan", "talosapi"}},
	// test bed and tools
	{"internal/simfleet", []string{"render", "internal/testenv", "inventory", "sim", "talosapi"}},
	{"internal/simtest", []string{"render", "examples", "internal/simfleet", "inventory", "sim", "talosapi"}},
	{"internal/demo", []string{
		"render", "checks", "examples", "internal/simfleet", "internal/testenv", "inventory", "machines", "netcheck", "plan", "sim", "storagecheck",
	}},
	{"internal/testenv/cmd/testbin", []string{"internal/testenv"}},
	{"internal/fleetbench", []string{"render", "checks", "internal/testenv", "inventory", "talosapi"}},
	{"internal/image", nil},
	{"internal/image/cmd/mkimage", []string{"internal/image"}},
	// the command: parse, call, render
	{"cmd/devata", []string{
		"backup", "backup/store", "render", "bootstrap", "certcheck", "checks", "checks/probe", "config", "drift", "examples", "gate", "internal/demo", "internal/simfleet",
		"internal/outfile", "internal/termsafe", "internal/testenv", "inventory", "lock", "machines", "membership", "netcheck", "plan", "provenance", "reconcile", "redact", "sim", "snapshot", "storagecheck", "talosapi",
	}},
}

// TestImportsRunDownTheLayers reads every package's non-test imports (as
// the build sees them, build tags and all) and fails on any devata import
// the graph does not allow, or any package missing from it.
func TestImportsRunDownTheLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	rank := map[string]int{}
	for i, p := range allowed {
		if _, dup := rank[p.pkg]; dup {
			t.Errorf("%s is listed twice", p.pkg)
		}
		rank[p.pkg] = i
		for _, imp := range p.imports {
			if r, ok := rank[imp]; !ok || r >= i {
				t.Errorf("the graph lets %s import %s, which is not listed before it: the layers would not run one way", p.pkg, imp)
			}
		}
	}
	found := map[string]bool{}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "tools") {
			return filepath.SkipDir
		}
		bp, err := build.ImportDir(path, 0)
		var none *build.NoGoError
		if errors.As(err, &none) {
			return nil // no Go files here, or only tests
		}
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		found[rel] = true
		i, ok := rank[rel]
		if !ok {
			t.Errorf("package %s is not in the import graph: add it to allowed in internal/layers, in its layer", rel)
			return nil
		}
		for _, imp := range bp.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if !slices.Contains(allowed[i].imports, dep) {
				t.Errorf("%s imports %s, which the graph does not allow (%s may import: %s)", rel, dep, rel, strings.Join(allowed[i].imports, ", "))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range allowed {
		if !found[p.pkg] {
			t.Errorf("the graph lists %s, which is not a package under %s: remove it from allowed", p.pkg, root)
		}
	}
}
