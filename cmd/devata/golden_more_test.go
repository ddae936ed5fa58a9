package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"devata.dev/devata/internal/golden"

	"devata.dev/devata/internal/simtest"
)

// everyCommand is each command of devata's tree by its key ("backup etcd"),
// cobra's help and hidden commands left out.
func everyCommand() []string {
	a := &app{streams: Streams{}, getenv: func(string) string { return "" }}
	root := a.newRootCommand()
	root.InitDefaultCompletionCmd()
	var keys []string
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			keys = append(keys, commandKey(sub))
			walk(sub)
		}
	}
	walk(root)
	return keys
}

// goldenName is the prefix of a command's goldens: its key with '-' for ' '.
func goldenName(key string) string { return strings.ReplaceAll(key, " ", "-") }

// Every command's help, one file each: what a user reads before running it.
// Nothing is normalised: help holds no time, port or path of a run.
func TestGoldenHelp(t *testing.T) {
	for _, key := range everyCommand() {
		t.Run(key, func(t *testing.T) {
			assertGolden(t, "help-"+goldenName(key)+".txt", devata(t, nil, append(strings.Fields(key), "--help")...), 0, nil)
		})
	}
}

// withoutOutputGolden are the commands whose output no golden holds, and why.
var withoutOutputGolden = map[string]string{
	"demo":                  "runs minutes with a real kube-apiserver; TestDemo holds its story step by step",
	"sim":                   "serves until interrupted; TestSimCommandServesTheInventory reads its banner",
	"completion":            "cobra's generated scripts",
	"completion bash":       "cobra's generated script",
	"completion fish":       "cobra's generated script",
	"completion powershell": "cobra's generated script",
	"completion zsh":        "cobra's generated script",
}

// A new command gets a golden of its output, or a line above saying why not.
func TestGoldenEveryCommandHasOne(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		if b := filepath.Base(f); !strings.HasPrefix(b, "help") {
			names = append(names, b)
		}
	}
	keys := everyCommand()
	for _, key := range keys {
		prefix := goldenName(key)
		has := slices.ContainsFunc(names, func(n string) bool {
			return strings.HasPrefix(n, prefix+".") || strings.HasPrefix(n, prefix+"-")
		})
		if _, excused := withoutOutputGolden[key]; has == excused {
			t.Errorf("devata %s: golden of its output %v, listed in withoutOutputGolden %v: want exactly one", key, has, excused)
		}
	}
	for key := range withoutOutputGolden {
		if !slices.Contains(keys, key) {
			t.Errorf("withoutOutputGolden names %q, which is no command", key)
		}
	}
}

// elapsed is how long a step took, at the end of bootstrap's ✓ lines.
var elapsed = golden.Pattern(`(?m) \((?:[0-9.]+(?:h|m|s|ms|µs|ns))+\)$`, " (<elapsed>)")

// progressLines drops the lines a step prints while it runs (each
// machine's progress, in the order the machines answer, and the waits,
// which depend on timing), keeping each step's header, its ✓ line and all
// that follows the last step; the test checks what it drops with
// strings.Contains instead.
func progressLines(text string) string {
	var kept []string
	inSteps := true
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(line, "==> drift report") {
			inSteps = false
		}
		if inSteps && strings.HasPrefix(line, "    ") && !strings.HasPrefix(line, "    ✓") {
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "")
}

// The first build from maintenance mode, without Kubernetes (--skip-nodes),
// then bootstrap again on the built fleet (nothing to do), a talosconfig
// signed for it, and apply rolling out an edited config. Normalised as
// TestGoldenFleet is, plus each step's elapsed time; the first build's
// progress lines are checked, not held (progressLines). --no-lease: the
// inventory's cluster endpoint is no API server of the test's.
func TestGoldenBootstrap(t *testing.T) {
	sf := startSim(t, simtest.Options{Maintenance: allMachines})
	rules := append(fleetRules(sf), elapsed)
	t.Run("first build", func(t *testing.T) {
		r := devata(t, nil, bootstrapArgs(sf, nil, "--yes")...)
		for _, m := range allMachines {
			lacks(t, "bootstrap's progress", r.stdout, "    "+m+": ")
		}
		lacks(t, "bootstrap's progress", r.stdout, "no control plane has etcd data: bootstrapping cp-1, the first control plane by name")
		assertGolden(t, "bootstrap.txt", r, 0, append(rules, progressLines))
	})
	t.Run("again", func(t *testing.T) {
		assertGolden(t, "bootstrap-again.txt", devata(t, nil, bootstrapArgs(sf, nil, "--yes", "--no-lease")...), 0, rules)
	})
	t.Run("gen talosconfig", func(t *testing.T) {
		file := filepath.Join(sf.Dir, "reader-talosconfig")
		r := devata(t, nil, "gen", "talosconfig", "--config", sf.settings, "--roles", "os:reader", "--ttl", "240h", "--file", file)
		assertGolden(t, "gen-talosconfig.txt", r, 0, rules)
		if _, err := os.Stat(file); err != nil {
			t.Error(err)
		}
	})
	t.Run("apply", func(t *testing.T) {
		// Without the kubeconfig bootstrap wrote: its server is the
		// inventory's endpoint, which is no API server of the test's.
		if err := os.Remove(filepath.Join(sf.Dir, "kubeconfig")); err != nil {
			t.Fatal(err)
		}
		sf.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
		assertGolden(t, "apply.txt", devata(t, nil, "apply", "--yes", "--no-lease", "--config", sf.settings), 0, rules)
	})
}
