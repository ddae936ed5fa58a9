package main

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// A drifted config is shown by YAML path as well as by line: apply
// --dry-run prints a changes: block before the unified diff, and the drift
// JSON report's config result carries the same lines; a rotated secret is
// in neither (issue 18).
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
}
