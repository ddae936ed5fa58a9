package main

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/plan"
	"devata.dev/devata/sim"
)

// apply and upgrade print their plans as JSON with -o json --dry-run: one
// document that decodes strictly into the documented shape, with the
// drifted machine's changes and no secret; the exit code is the dry run's;
// without --dry-run -o json is a usage error (issue 33).
func TestApplyAndUpgradePlansAsJSON(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	drifted := bytes.Replace(sf.Desired["cp-2"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
	drifted = bytes.Replace(drifted, []byte(sf.Bundle.Secrets.BootstrapToken), []byte("abcdef.0123456789abcdef"), 1)
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{DriftedConfig: drifted})
	decode := func(what, out string) plan.Rollout {
		t.Helper()
		dec := json.NewDecoder(strings.NewReader(out))
		dec.DisallowUnknownFields()
		var doc plan.Rollout
		if err := dec.Decode(&doc); err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		if dec.More() {
			t.Fatalf("%s: more than one document on stdout:\n%s", what, out)
		}
		return doc
	}
	applies := sf.Sim.Machine("cp-2").Calls("ApplyConfiguration")
	r := devata(t, nil, "apply", "--config", sf.settings, "--dry-run", "-o", "json")
	if r.code != 1 {
		t.Fatalf("apply --dry-run -o json: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	doc := decode("apply", r.stdout)
	if doc.APIVersion != "devata.dev/v1alpha2" || doc.Kind != "ApplyPlan" || doc.Command != "apply" || doc.Cluster != sf.Inventory.Cluster.Name || !doc.Simulated || len(doc.Provenance.InventorySHA256) != 64 {
		t.Errorf("header: %+v", doc)
	}
	if doc.Summary != (plan.RolloutSummary{Pending: 1, Skipped: 0, Machines: 5, ExitCode: 1}) {
		t.Errorf("summary %+v", doc.Summary)
	}
	if len(doc.Steps) != 5 {
		t.Errorf("%d steps, want one per machine (5)", len(doc.Steps))
	}
	for _, act := range doc.Steps {
		switch act.Machine {
		case "cp-2":
			if act.Kind != "apply" || act.Status != plan.StatusPending || act.By != "apply" || act.Mode == "" || act.Role != "controlplane" || !strings.Contains(act.Diff, "+            - time.cloudflare.com") ||
				len(act.Changes) != 1 || act.Changes[0] != `machine.time.servers[0]: "pool.ntp.org" → "time.cloudflare.com"` || len(act.SecretsChanged) != 1 ||
				len(act.Evidence) != 1 || !strings.HasPrefix(act.Evidence[0].Observed, "MachineConfig v1alpha1 observed") {
				t.Errorf("cp-2: %+v", act)
			}
			// the talosctl equivalent names the inventory's address, never the sim's dial override
			cp2 := sf.Inventory.Machine("cp-2")
			if want := "talosctl apply-config --nodes " + cp2.Address + " --file rendered/cp-2.yaml --mode " + act.Mode; !slices.Contains(act.Talosctl, want) {
				t.Errorf("cp-2: talosctl %q, want %q among them", act.Talosctl, want)
			}
		default:
			if act.Kind != "none" || act.Status != plan.StatusDone || act.Summary != "in sync" {
				t.Errorf("%s: %+v, want none, done", act.Machine, act)
			}
		}
	}
	if strings.Contains(r.stdout, "abcdef.0123456789abcdef") || strings.Contains(r.stdout, sf.Bundle.Secrets.BootstrapToken) {
		t.Errorf("the JSON plan holds a token")
	}
	if n := sf.Sim.Machine("cp-2").Calls("ApplyConfiguration") - applies; n > 1 { // the dry run's own
		t.Errorf("%d ApplyConfiguration calls for a dry run", n)
	}

	r = devata(t, nil, "upgrade", "--config", sf.settings, "--dry-run", "-o", "json")
	if r.code != 0 {
		t.Fatalf("upgrade --dry-run -o json: exit %d, want 0\n%s%s", r.code, r.stdout, r.err)
	}
	if doc := decode("upgrade", r.stdout); doc.Command != "upgrade" || doc.Summary.Pending != 0 || doc.Summary.ExitCode != 0 {
		t.Errorf("upgrade: %+v", doc)
	}

	for _, args := range [][]string{{"apply", "-o", "json"}, {"upgrade", "-o", "json", "--yes"}, {"apply", "--dry-run", "-o", "yaml"}} {
		if r := devata(t, nil, append(args, "--config", sf.settings)...); r.code != exitUsage {
			t.Errorf("devata %v: exit %d, want 64\n%s", args, r.code, r.err)
		}
	}
}

// docs/report.md documents every field of the plan's JSON, no other, and
// its example decodes strictly into it (its steps are devata plan's, held
// to their table by TestPlanJSONMatchesItsDocs).
func TestApplyPlanJSONMatchesItsDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Plans of apply and upgrade (`-o json`)\n")
	if !ok {
		t.Fatal("docs/report.md has no section on the plans' JSON")
	}
	table := func(heading string) map[string]bool {
		_, s, ok := strings.Cut(section, "\n"+heading+"\n")
		if !ok {
			t.Fatalf("docs/report.md has no %q", heading)
		}
		s, _, _ = strings.Cut(s, "\n#")
		fields := map[string]bool{}
		for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z0-9]+)` \\| ([^|]*)\\|").FindAllStringSubmatch(s, -1) {
			fields[m[1]] = strings.Contains(m[2], "omitempty")
		}
		return fields
	}
	for heading, typ := range map[string]reflect.Type{
		"### `ApplyPlan`":  reflect.TypeFor[plan.Rollout](),
		"### `upgrade`":    reflect.TypeFor[plan.Upgrade](),
		"### Plan summary": reflect.TypeFor[plan.RolloutSummary](),
	} {
		docs := table(heading)
		code := map[string]bool{}
		for i := range typ.NumField() {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			code[name] = strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		}
		if !reflect.DeepEqual(docs, code) {
			t.Errorf("%s: docs %v, code %v (field: omitempty)", heading, docs, code)
		}
	}
	example := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(section)
	if example == nil {
		t.Fatal("no example")
	}
	dec := json.NewDecoder(strings.NewReader(example[1]))
	dec.DisallowUnknownFields()
	var doc plan.Rollout
	if err := dec.Decode(&doc); err != nil {
		t.Errorf("the example does not decode: %v", err)
	}
	if doc.APIVersion != plan.RolloutAPIVersion || doc.Kind != plan.RolloutKind {
		t.Errorf("the example is %s %s, want %s %s", doc.APIVersion, doc.Kind, plan.RolloutAPIVersion, plan.RolloutKind)
	}
}

// A Kubernetes version change is in apply's JSON plan as devata plan's
// JSON has it (one shape, from the same planner): the moves in talosctl
// upgrade-k8s' order, the steps before them, upgrade-k8s by hand; and each
// moving machine's step says so in its notes.
func TestApplyPlanJSONHasTheKubernetesChange(t *testing.T) {
	sf, _, kubeconfig := startOnKubernetes(t, "v1.33.5")
	r := devata(t, nil, "apply", "--dry-run", "-o", "json", "--config", sf.settings, kubeconfig)
	if r.code != 1 {
		t.Fatalf("apply --dry-run -o json: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	var doc plan.Rollout
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	k := doc.Kubernetes
	if k == nil {
		t.Fatalf("no kubernetes in the JSON plan:\n%s", r.stdout)
	}
	var comps []string
	for _, s := range k.Steps {
		comps = append(comps, s.Component)
	}
	if k.From != "v1.33.5" || k.To != "v1.34.1" || !slices.Equal(comps, []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet"}) ||
		len(k.Before) == 0 || k.Before[0].Kind != "kubernetes-deprecated-apis" ||
		!slices.Equal(k.Talosctl, []string{"talosctl --nodes " + sf.Inventory.Machine("cp-1").Address + " upgrade-k8s --to 1.34.1"}) {
		t.Errorf("kubernetes %+v", k)
	}
	for _, s := range doc.Steps {
		if s.Kind == "apply" && !slices.ContainsFunc(s.Notes, func(n string) bool { return strings.HasPrefix(n, "Kubernetes v1.33.5, one apply per component:") }) {
			t.Errorf("%s's step does not say its Kubernetes phases: %q", s.Machine, s.Notes)
		}
	}

	r = devata(t, nil, "plan", "-o", "json", "--config", sf.settings, kubeconfig)
	var p plan.Plan
	if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	if !reflect.DeepEqual(p.Kubernetes, k) {
		t.Errorf("devata plan's kubernetes\n%+v\napply's\n%+v", p.Kubernetes, k)
	}
}
