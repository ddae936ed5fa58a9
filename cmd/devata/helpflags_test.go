package main

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// helpFlags are the flags a command's help lists (local and global).
func helpFlags(t *testing.T, args ...string) []string {
	t.Helper()
	r := devata(t, nil, append(args, "--help")...)
	if r.code != 0 {
		t.Fatalf("%v --help: exit %d\n%s", args, r.code, r.err)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?--([a-z0-9-]+)`).FindAllStringSubmatch(r.stdout, -1) {
		flags = append(flags, m[1])
	}
	return flags
}

// Each command's help lists the global flags it reads and no other (issue
// 33: plan --help offered --wait, --kubeconfig-out for writing,
// --etcd-settle; every command offered --kubeconfig and --talosconfig).
func TestHelpListsOnlyTheFlagsACommandUses(t *testing.T) {
	for _, tc := range []struct {
		args       []string
		has, lacks []string
	}{
		{[]string{"version"}, []string{"verbose", "log-format", "config"}, []string{"inventory", "talosconfig", "kubeconfig", "timeout"}},
		{[]string{"demo"}, []string{"kubernetes", "verbose"}, []string{"inventory", "talosconfig", "kubeconfig", "concurrency"}},
		{[]string{"validate"}, []string{"inventory", "age-identity"}, []string{"talosconfig", "kubeconfig", "endpoints", "timeout"}},
		{[]string{"gen", "secrets"}, []string{"inventory", "encrypt-to"}, []string{"talosconfig", "kubeconfig", "age-identity"}},
		{[]string{"plan"}, []string{"inventory", "talosconfig", "kubeconfig", "kubeconfig-out", "recover-from", "skip-nodes", "output"}, []string{"wait", "etcd-settle", "yes"}},
		{[]string{"bootstrap"}, []string{"wait", "etcd-settle", "kubeconfig-out", "talosconfig", "kubeconfig"}, nil},
		{[]string{"drift"}, []string{"inventory", "talosconfig", "context", "endpoints", "kubeconfig", "timeout", "concurrency", "checks", "machines"}, nil},
		{[]string{"backup", "etcd"}, []string{"inventory", "talosconfig", "timeout"}, []string{"kubeconfig"}},
	} {
		got := helpFlags(t, tc.args...)
		for _, f := range tc.has {
			if !slices.Contains(got, f) {
				t.Errorf("devata %s --help lacks --%s: %v", strings.Join(tc.args, " "), f, got)
			}
		}
		for _, f := range tc.lacks {
			if slices.Contains(got, f) {
				t.Errorf("devata %s --help offers --%s, which it does not use: %v", strings.Join(tc.args, " "), f, got)
			}
		}
	}
	// the root's help lists every global flag, and a flag hidden for one
	// command's help is listed again by the next
	if got := helpFlags(t); !slices.Contains(got, "kubeconfig") || !slices.Contains(got, "talosconfig") {
		t.Errorf("devata --help lacks global flags: %v", got)
	}
	helpFlags(t, "version")
	if got := helpFlags(t, "drift"); !slices.Contains(got, "kubeconfig") {
		t.Errorf("after version --help, drift --help lacks --kubeconfig: %v", got)
	}
	// hidden in help, still accepted
	if r := devata(t, nil, "version", "--kubeconfig", "/nonexistent"); r.code != 0 {
		t.Errorf("version --kubeconfig: exit %d\n%s", r.code, r.err)
	}
}

// Every command says which global flags it uses, so a new command cannot
// inherit a help that lists flags it ignores.
func TestEveryCommandDeclaresTheGlobalFlagsItUses(t *testing.T) {
	a := &app{streams: Streams{}, getenv: func(string) string { return "" }}
	root := a.newRootCommand()
	root.InitDefaultCompletionCmd()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			if _, ok := globalFlagsUsed[commandKey(sub)]; !ok {
				t.Errorf("devata %s is not in globalFlagsUsed", commandKey(sub))
			}
			walk(sub)
		}
	}
	walk(root)
	for key := range globalFlagsUsed {
		if c, _, err := root.Find(strings.Fields(key)); err != nil || commandKey(c) != key {
			t.Errorf("globalFlagsUsed names %q, which is no command", key)
		}
	}
}

// -o is a format wherever devata takes it; gen's path flags are --file and
// --dir, and the old -o/--output still works with a deprecation notice on
// stderr, hidden from help (issue 33: -o was a format for drift and plan
// but a path for gen).
func TestOutputFlagIsAFormatAndGenPathsKeepTheOldSpelling(t *testing.T) {
	for _, args := range [][]string{{"drift"}, {"plan"}, {"apply"}, {"upgrade"}} {
		r := devata(t, nil, append(args, "--help")...)
		if !regexp.MustCompile(`-o, --output string\s+\S*\s*(report|plan) format`).MatchString(r.stdout) {
			t.Errorf("devata %s --help: -o is not a format:\n%s", args[0], r.stdout)
		}
	}
	inv := homelab(t)
	dir := t.TempDir()
	for _, tc := range []struct {
		args      []string
		path, now string
	}{
		{[]string{"gen", "secrets", "-i", inv, "--file", dir + "/new.yaml"}, dir + "/new.yaml", ""},
		{[]string{"gen", "secrets", "-i", inv, "-o", dir + "/old.yaml"}, dir + "/old.yaml", "use --file"},
		{[]string{"gen", "secrets", "-i", inv}, filepath.Join(filepath.Dir(inv), "secrets.yaml"), ""},
		{[]string{"gen", "config", "-i", inv, "--file", dir + "/new.yaml", "--dir", dir + "/new"}, "", ""},
		{[]string{"gen", "config", "-i", inv, "--dir", dir + "/new"}, dir + "/new/talosconfig", ""},
		{[]string{"gen", "config", "-i", inv, "--output", dir + "/old"}, dir + "/old/talosconfig", "use --dir"},
	} {
		r := devata(t, nil, tc.args...)
		if tc.path == "" { // gen config has no --file
			if r.code != exitUsage {
				t.Errorf("devata %v: exit %d, want 64", tc.args, r.code)
			}
			continue
		}
		if r.code != 0 {
			t.Fatalf("devata %v: exit %d\n%s", tc.args, r.code, r.err)
		}
		if _, err := os.Stat(tc.path); err != nil {
			t.Errorf("devata %v wrote no %s: %v", tc.args, tc.path, err)
		}
		if deprecated := strings.Contains(r.err, "Flag --output has been deprecated, "+tc.now); deprecated != (tc.now != "") || strings.Contains(r.stdout, "deprecated") {
			t.Errorf("devata %v: deprecation notice on stderr %v, want %v:\n%s", tc.args, deprecated, tc.now != "", r.err)
		}
	}
	for _, args := range [][]string{{"gen", "secrets"}, {"gen", "config"}} {
		if got := helpFlags(t, args...); slices.Contains(got, "output") {
			t.Errorf("devata %v --help still offers the deprecated --output: %v", args, got)
		}
	}
}
