package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A wrong command line exits 64 (EX_USAGE) and points at --help before
// anything is read or dialled; what devata finds wrong in the world
// (files, machines, settings from the environment) stays 2.
func TestUsageErrorsExit64(t *testing.T) {
	inv := homelab(t)
	for _, tc := range []struct {
		args       []string
		msg, usage string
	}{
		{[]string{"nosuch"}, `unknown command "nosuch" for "devata"`, "devata"},
		{[]string{"drft"}, "did you mean drift?", "devata"},
		{[]string{"gen", "nosuch"}, `unknown command "nosuch" for "devata gen"`, "devata gen"},
		{[]string{"drift", "--no-such-flag"}, "unknown flag: --no-such-flag", "devata drift"},
		{[]string{"drift", "--timeout", "abc"}, `invalid argument "abc" for "--timeout" flag`, "devata drift"},
		{[]string{"drift", "--concurrency", "0"}, "concurrency must be at least 1", "devata drift"},
		{[]string{"drift", "--log-format", "xml"}, "log-format must be text or json", "devata drift"},
		{[]string{"validate", "extra"}, `unknown command "extra" for "devata validate"`, "devata validate"},
		{[]string{"gen", "secrets", "a", "b"}, `unknown command "a" for "devata gen secrets"`, "devata gen secrets"},
		{[]string{"drift", "-o", "nope", "-i", inv}, `output must be one of table, json, yaml, junit, prom, html, got "nope"`, "devata drift"},
		{[]string{"drift", "--stream", "-o", "table", "-i", inv}, "--stream writes JSON as it goes", "devata drift"},
		{[]string{"drift", "--checks", "cilium-probe", "-i", inv}, "it runs only with --probe", "devata drift"},
		{[]string{"drift", "--checks", "confg", "-i", inv}, `--checks: no check "confg"; did you mean "config"? (have config, talos-version`, "devata drift"},
		{[]string{"reconcile", "--once", "--checks", "kubelets"}, `--checks: no check "kubelets"`, "devata reconcile"},
		{[]string{"plan", "-o", "yaml", "-i", inv}, `unknown output "yaml"`, "devata plan"},
		{[]string{"apply", "--mode", "sideways", "-i", inv}, `unknown apply mode "sideways"`, "devata apply"},
		{[]string{"reconcile", "--mode", "sideways"}, `unknown apply mode "sideways"`, "devata reconcile"},
		{[]string{"reconcile", "--shard", "3/3"}, "shard", "devata reconcile"},
		{[]string{"reconcile", "--once", "--leader-elect"}, "use one or the other", "devata reconcile"},
		{[]string{"reconcile", "--report-only", "--dry-run"}, "--report-only and --dry-run exclude each other", "devata reconcile"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := devata(t, nil, tc.args...)
			if r.code != exitUsage {
				t.Errorf("exit %d, want 64\n%s%s", r.code, r.stdout, r.err)
			}
			if !strings.Contains(r.err, tc.msg) {
				t.Errorf("stderr lacks %q:\n%s", tc.msg, r.err)
			}
			if hint := "run '" + tc.usage + " --help' for usage\n"; !strings.HasSuffix(r.err, hint) {
				t.Errorf("stderr does not end with %q:\n%s", hint, r.err)
			}
		})
	}
}

func TestEnvironmentErrorsExit2(t *testing.T) {
	dir := t.TempDir()
	notInventory := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(notInventory, []byte("apiVersion: devata.dev/v1alpha1\nkind: Inventory\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
	}{
		{"inventory missing", nil, []string{"drift", "-i", filepath.Join(dir, "nope.yaml")}},
		{"inventory invalid", nil, []string{"drift", "-i", notInventory}},
		{"settings file missing", nil, []string{"drift", "--config", filepath.Join(dir, "nope.yaml")}},
		{"bad value from the environment", map[string]string{"DEVATA_CONCURRENCY": "0"}, []string{"drift"}},
		{"output from the environment", map[string]string{"DEVATA_OUTPUT": "nope"}, []string{"drift"}},
		{"talosconfig missing", nil, []string{"drift", "-i", homelab(t), "--talosconfig", filepath.Join(dir, "nope")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := devata(t, tc.env, tc.args...)
			if r.code != exitTrouble || strings.Contains(r.err, "--help") {
				t.Errorf("exit %d, want 2 without a usage hint\n%s", r.code, r.err)
			}
		})
	}
}

// Help is not an error, and a group alone shows its help.
func TestHelpExits0(t *testing.T) {
	for _, args := range [][]string{{}, {"--help"}, {"gen"}, {"drift", "--help"}, {"help", "drift"}} {
		if r := devata(t, nil, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.err)
		}
	}
}
