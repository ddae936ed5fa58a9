package main

import (
	"encoding/json"
	"strings"
	"testing"

	"devata.dev/devata/internal/golden"
)

// A Kubernetes minor upgrade's steps before any component moves are plan
// steps of devata plan (issue 36): the check that no client still requests
// an API the new version removes, read from the real API server's
// apiserver_requested_deprecated_apis, then each moving machine's pull of
// its new images with the talosctl image pull that does it by hand (the
// kubelet's into the system namespace, the control plane's into cri). The
// 3+2 fleet runs v1.33.5 and the inventory says v1.34.1; held byte for
// byte in text, markdown and JSON, and nothing is written.
func TestGoldenPlanKubernetesUpgrade(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetes(t, "v1.33.5")
	rules := append([]golden.Rule{golden.Literal(k.env.Kubeconfig, "<kubeconfig>")}, fleetRules(sf)...)
	cfg := []string{"--config", sf.settings, kubeconfig}
	for _, f := range []struct{ format, file string }{
		{"text", "plan-kubernetes.txt"}, {"markdown", "plan-kubernetes.md"}, {"json", "plan-kubernetes.json"},
	} {
		t.Run(f.format, func(t *testing.T) {
			assertGolden(t, f.file, devata(t, nil, append([]string{"plan", "-o", f.format}, cfg...)...), 1, rules)
		})
	}

	// the structured steps, read as a tool reads them
	r := devata(t, nil, append([]string{"plan", "-o", "json"}, cfg...)...)
	var doc struct {
		Kubernetes struct {
			Before []struct {
				Step, Machine, Status, By, Reason string
				Talosctl                          []string
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	before := doc.Kubernetes.Before
	if len(before) != 1+len(allMachines) {
		t.Fatalf("kubernetes.before has %d steps, want the check and a pull on each of %d machines: %+v", len(before), len(allMachines), before)
	}
	if s := before[0]; s.Step != "kubernetes-deprecated-apis" || s.Status != "done" || s.By != "apply" {
		t.Errorf("first step %+v, want the deprecated-API check, done, by apply", s)
	}
	pulled := map[string]bool{}
	for _, s := range before[1:] {
		pulled[s.Machine] = true
		addr := sf.Inventory.Machine(s.Machine).Address
		if s.Step != "kubernetes-image-pull" || s.Status != "pending" {
			t.Errorf("%s: step %s %s, want kubernetes-image-pull pending", s.Machine, s.Step, s.Status)
		}
		want := "talosctl --nodes " + addr + " image pull --namespace system "
		if !strings.HasPrefix(s.Talosctl[len(s.Talosctl)-1], want) || !strings.HasSuffix(s.Talosctl[len(s.Talosctl)-1], ":v1.34.1") {
			t.Errorf("%s: last command %q, want the kubelet's pull into system (%s…:v1.34.1)", s.Machine, s.Talosctl[len(s.Talosctl)-1], want)
		}
	}
	for _, name := range allMachines {
		if !pulled[name] {
			t.Errorf("no image pull step for %s", name)
		}
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Errorf("plan applied %d configs", applies)
	}
}
