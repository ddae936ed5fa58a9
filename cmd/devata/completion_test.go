package main

import (
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
)

// complete asks for completions as the shell scripts of devata completion
// do, through cobra's hidden __complete, and returns the values offered
// (descriptions cut off) and the directive line.
func complete(t *testing.T, env map[string]string, args ...string) ([]string, string) {
	t.Helper()
	r := devata(t, env, append([]string{"__complete"}, args...)...)
	if r.code != 0 {
		t.Fatalf("__complete %v: exit %d\n%s", args, r.code, r.err)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var values []string
	for _, l := range lines[:len(lines)-1] {
		v, _, _ := strings.Cut(l, "\t")
		values = append(values, v)
	}
	return values, lines[len(lines)-1]
}

func TestDynamicCompletion(t *testing.T) {
	inv := homelab(t)
	formats := []string{}
	for _, f := range drift.Formats() {
		formats = append(formats, string(f))
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"checks", nil, []string{"drift", "--checks", ""}, checks.Names()},
		{"checks after a comma", nil, []string{"drift", "--checks", "config,kube"}, []string{"config,kubelet"}},
		{"reconcile checks", nil, []string{"reconcile", "--checks", "cilium-p"}, []string{"cilium-probe"}},
		{"machines from -i", nil, []string{"drift", "-i", inv, "--machines", ""},
			[]string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2", "10.20.0.11", "10.20.0.12", "10.20.0.13", "10.20.0.21", "10.20.0.22"}},
		{"machines not offered twice", nil, []string{"apply", "-i", inv, "--machines", "cp-1,10.20.0.12,"},
			[]string{"cp-1,10.20.0.12,cp-3", "cp-1,10.20.0.12,worker-1", "cp-1,10.20.0.12,worker-2", "cp-1,10.20.0.12,10.20.0.13", "cp-1,10.20.0.12,10.20.0.21", "cp-1,10.20.0.12,10.20.0.22"}},
		{"machines from DEVATA_INVENTORY", map[string]string{"DEVATA_INVENTORY": inv}, []string{"drift", "--machines", "w"}, []string{"worker-1", "worker-2"}},
		{"no inventory, no machines", nil, []string{"drift", "-i", inv + ".missing", "--machines", ""}, nil},
		{"drift formats", nil, []string{"drift", "-o", ""}, formats},
		{"plan formats", nil, []string{"plan", "-o", ""}, []string{"text", "markdown", "json"}},
		{"apply modes", nil, []string{"apply", "--mode", ""}, []string{"auto", "no-reboot", "reboot", "staged", "try"}},
		{"reconcile modes", nil, []string{"reconcile", "--mode", ""}, []string{"auto", "no-reboot", "reboot", "staged", "try"}},
		{"log formats", nil, []string{"drift", "--log-format", ""}, []string{"text", "json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, directive := complete(t, tc.env, tc.args...)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
			if directive != ":4" { // ShellCompDirectiveNoFileComp: never file names
				t.Errorf("directive %s, want :4", directive)
			}
		})
	}
}

// The scripts cobra's default completion command writes call __complete.
func TestCompletionScripts(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		r := devata(t, nil, "completion", shell)
		if r.code != 0 || !strings.Contains(r.stdout, "__complete") {
			t.Errorf("completion %s: exit %d\n%.200s%s", shell, r.code, r.stdout, r.err)
		}
	}
}
