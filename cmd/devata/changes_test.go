package main

import (
	"bytes"
	"encoding/json"
	"html"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// A drifted config is shown by YAML path as well as by line: apply
// --dry-run prints a changes: block before the unified diff, the drift
// JSON report's config result carries the same lines, and so do drift's
// table, JUnit and HTML page and plan's text, markdown and JSON; a rotated
// secret is in none of them (issue 18).
func TestApplyDryRunAndDriftListChangesByPath(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	drifted := bytes.Replace(sf.Desired["cp-2"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
	drifted = bytes.Replace(drifted, []byte(`net.core.bpf_jit_harden: "1"`), []byte(`net.core.bpf_jit_harden: "0"`), 1)
	drifted = bytes.Replace(drifted, []byte(sf.Bundle.Secrets.BootstrapToken), []byte("abcdef.0123456789abcdef"), 1)
	if bytes.Count(drifted, []byte("pool.ntp.org")) != 1 || !bytes.Contains(drifted, []byte(`bpf_jit_harden: "0"`)) || !bytes.Contains(drifted, []byte("abcdef.0123456789abcdef")) {
		t.Fatal("the drifted config lacks one of its three changes: the test would prove less than it says")
	}
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{DriftedConfig: drifted})
	want := []string{
		`machine.time.servers[0]: "pool.ntp.org" → "time.cloudflare.com"`,
		`machine.sysctls["net.core.bpf_jit_harden"]: "0" → "1"`,
	}

	r := devata(t, nil, "apply", "--config", sf.settings, "--dry-run")
	if r.code != 1 {
		t.Fatalf("apply --dry-run: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	block := "      changes:\n"
	for _, w := range want {
		block += "        " + w + "\n"
	}
	i, j := strings.Index(r.stdout, block), strings.Index(r.stdout, "--- applied")
	if i < 0 || j < 0 || i > j {
		t.Errorf("apply --dry-run does not print\n%sbefore the unified diff:\n%s", block, r.stdout)
	}
	if strings.Contains(r.stdout, "abcdef.0123456789abcdef") || strings.Contains(r.stdout, "cluster.token:") {
		t.Errorf("apply --dry-run shows the rotated token as a change:\n%s", r.stdout)
	}

	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json")
	if r.code != 1 {
		t.Fatalf("drift: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	var rep drift.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	found := false
	for _, res := range rep.Results {
		if res.Machine == "cp-2" && res.Check == "config" {
			found = true
			if !slices.Equal(res.Changes, want) {
				t.Errorf("config result's changes %q, want %q", res.Changes, want)
			}
			if !strings.Contains(res.Reason, "1 secret changed") {
				t.Errorf("the rotated token is not named in the reason: %q", res.Reason)
			}
		} else if len(res.Changes) > 0 {
			t.Errorf("%s/%s has changes %q: only cp-2's config drifted", res.Machine, res.Check, res.Changes)
		}
	}
	if !found {
		t.Fatalf("no config result for cp-2:\n%s", r.stdout)
	}

	// The other formats of drift and every format of plan show the same
	// lines, each as its format lays them out, and never the token.
	lines := func(indent string) string {
		var b strings.Builder
		for _, w := range want {
			b.WriteString(indent + w + "\n")
		}
		return b.String()
	}
	for _, c := range []struct {
		what string
		args []string
		want string
	}{
		{"drift -o table", []string{"drift", machineChecks, "-o", "table"}, "    changes:\n" + lines("      ") + "    diff:\n"},
		{"drift -o junit", []string{"drift", machineChecks, "-o", "junit"}, "changes:\n" + lines("  ") + "diff:\n"},
		{"drift -o html", []string{"drift", machineChecks, "-o", "html"}, `<dt>changes</dt><dd><ul class="changes"><li><code>` + want[0] + `</code></li><li><code>` + want[1] + `</code></li></ul></dd>`},
		{"plan -o text", []string{"plan", "--skip-nodes"}, "changes:\n" + lines("                                         ")},
		{"plan -o markdown", []string{"plan", "--skip-nodes", "-o", "markdown"}, "- Changes by YAML path (applied → desired):\n\n  ```text\n" + lines("  ") + "  ```\n"},
	} {
		r := devata(t, nil, append(c.args, "--config", sf.settings)...)
		if r.code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s%s", c.what, r.code, r.stdout, r.err)
			continue
		}
		out := r.stdout
		if strings.Contains(c.what, "html") {
			out = html.UnescapeString(out)
		}
		if !strings.Contains(out, c.want) {
			t.Errorf("%s lacks\n%s\nin:\n%s", c.what, c.want, out)
		}
		if strings.Contains(out, "abcdef.0123456789abcdef") || strings.Contains(out, sf.Bundle.Secrets.BootstrapToken) {
			t.Errorf("%s shows the token", c.what)
		}
	}
	r = devata(t, nil, "plan", "--config", sf.settings, "--skip-nodes", "-o", "json")
	var plan struct {
		Actions []struct {
			Step, Machine string
			Changes       []string
		} `json:"actions"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	found = false
	for _, a := range plan.Actions {
		if a.Step == "apply" && a.Machine == "cp-2" {
			found = true
			if !slices.Equal(a.Changes, want) {
				t.Errorf("plan -o json: apply cp-2's changes %q, want %q", a.Changes, want)
			}
		} else if len(a.Changes) > 0 {
			t.Errorf("plan -o json: %s %s has changes %q: only cp-2's config drifted", a.Step, a.Machine, a.Changes)
		}
	}
	if !found {
		t.Errorf("plan -o json has no apply step for cp-2:\n%s", r.stdout)
	}
}
