package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	configres "github.com/siderolabs/talos/pkg/machinery/resources/config"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
)

// todayPatch is what an operator on Talos 1.13 or 1.14 writes for a
// machine: the multi-document network configuration Talos 1.12 introduced
// (HostnameConfig, ResolverConfig, LinkConfig, TimeSyncConfig), in place of
// v1alpha1's machine.network and machine.time fields. Every value differs
// from what the machines start with, so that apply has each to write.
const todayPatch = `apiVersion: v1alpha1
kind: HostnameConfig
hostname: NAME
---
apiVersion: v1alpha1
kind: ResolverConfig
nameservers:
  - address: 8.8.8.8
  - address: 1.0.0.1
---
apiVersion: v1alpha1
kind: LinkConfig
name: enp2s0
up: true
mtu: 9000
---
apiVersion: v1alpha1
kind: TimeSyncConfig
ntp:
  servers:
    - pool.ntp.org
`

var kindLine = regexp.MustCompile(`(?m)^kind: (\S+)$`)

// Issue 30's acceptance, end to end for each release operators run today:
// an inventory on Talos v1.14.1 with Kubernetes v1.37.0 (and v1.13.9 with
// v1.36.3) whose machines take a patch of HostnameConfig, ResolverConfig,
// LinkConfig and TimeSyncConfig documents validates, renders those
// documents (gen config), plans for its release's contract, applies them
// to a bootstrapped sim fleet on that release, and drifts clean after. The
// read-back through the real talosctl of each release is
// sim.TestRealTalosctl114 and TestRealTalosctl113 (tag talosctl).
func TestTalosTodayValidateRenderApplyDrift(t *testing.T) {
	for _, tc := range []struct {
		talos, kubernetes, contract string
	}{
		{"v1.14.1", "v1.37.0", "1.14"},
		{"v1.13.9", "v1.36.3", "1.13"},
	} {
		t.Run(tc.talos, func(t *testing.T) {
			sf := startSim(t, simtest.Options{
				Example: examples.HomelabV114Name, TalosVersion: tc.talos, Bootstrap: true,
				EditInventory: func(s string) string {
					s = strings.Replace(s, "  talosVersion: v1.14.1\n", "  talosVersion: "+tc.talos+"\n", 1)
					return strings.Replace(s, "  kubernetesVersion: v1.37.0\n", "  kubernetesVersion: "+tc.kubernetes+"\n", 1)
				},
			})
			inv := filepath.Join(sf.Dir, "inventory.yaml")

			// The fleet runs the example; now the operator adds a patch to every machine.
			for _, m := range allMachines {
				patch := strings.Replace(todayPatch, "NAME", m, 1)
				if err := os.WriteFile(filepath.Join(sf.Dir, "patches", "today-"+m+".yaml"), []byte(patch), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			raw, err := os.ReadFile(inv)
			if err != nil {
				t.Fatal(err)
			}
			text := strings.Replace(string(raw), "patches: [patches/cp-1.yaml]", "patches: [patches/cp-1.yaml, patches/today-cp-1.yaml]", 1)
			for _, m := range allMachines[1:] {
				text = strings.Replace(text, "  - name: "+m+"\n", "  - name: "+m+"\n    patches: [patches/today-"+m+".yaml]\n", 1)
			}
			if strings.Count(text, "patches/today-") != len(allMachines) {
				t.Fatalf("the example's machines changed; the test patches %d of 5:\n%s", strings.Count(text, "patches/today-"), text)
			}
			if err := os.WriteFile(inv, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}

			r := devata(t, nil, "validate", "-i", inv)
			if r.code != 0 || !strings.Contains(r.stdout, "is valid: 5 machines") {
				t.Fatalf("validate: exit %d\n%s%s", r.code, r.stdout, r.err)
			}

			out := filepath.Join(t.TempDir(), "out")
			r = devata(t, nil, "gen", "config", "-i", inv, "-o", out)
			if r.code != 0 {
				t.Fatalf("gen config: exit %d\n%s%s", r.code, r.stdout, r.err)
			}
			for _, m := range allMachines {
				cfg, err := os.ReadFile(filepath.Join(out, m+".yaml"))
				if err != nil {
					t.Fatal(err)
				}
				// Talos merges a patch's lists into the cluster's (configpatcher):
				// the machine's servers and resolvers come after the common ones
				docs := map[string]string{}
				for _, doc := range strings.Split(string(cfg), "\n---\n") {
					if k := kindLine.FindStringSubmatch(doc); k != nil {
						docs[k[1]] += doc + "\n"
					}
				}
				for kind, want := range map[string]string{
					"HostnameConfig": "\nhostname: " + m + "\n",
					"ResolverConfig": "\n    - address: 1.1.1.1\n    - address: 9.9.9.9\n    - address: 8.8.8.8\n    - address: 1.0.0.1\n",
					"LinkConfig":     "\nname: enp2s0\nup: true\nmtu: 9000",
					"TimeSyncConfig": "\n        - time.cloudflare.com\n        - pool.ntp.org\n",
				} {
					if !strings.Contains(docs[kind], want) {
						t.Errorf("rendered %s: its %s documents lack %q", m, kind, want)
					}
				}
				if !strings.Contains(string(cfg), "image: ghcr.io/siderolabs/kubelet:"+tc.kubernetes+"\n") {
					t.Errorf("rendered %s: no kubelet %s", m, tc.kubernetes)
				}
			}

			r = devata(t, nil, "plan", "--config", sf.settings, "-o", "json", "--skip-nodes")
			var p struct {
				Contract struct{ Talos, Target string }
				Blocked  int
			}
			if err := json.Unmarshal([]byte(r.stdout), &p); err != nil {
				t.Fatalf("plan: exit %d: %v\n%s%s", r.code, err, r.stdout, r.err)
			}
			if p.Contract.Talos != tc.contract || p.Contract.Target != tc.talos || p.Blocked != 0 {
				t.Errorf("plan: contract %+v, %d blocked; want %s's, none blocked\n%s", p.Contract, p.Blocked, tc.contract, r.stdout)
			}

			// before apply, the config check sees every machine's patch missing
			if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks); r.code != 1 {
				t.Fatalf("drift before apply: exit %d, want 1 (5 machines lack the patch)\n%s%s", r.code, r.stdout, r.err)
			}
			r = devata(t, nil, "apply", "--yes", "--config", sf.settings)
			show(t, r)
			if r.code != 0 {
				t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
			}
			for _, m := range allMachines {
				if !strings.Contains(r.stdout, m) {
					t.Errorf("apply does not name %s:\n%s", m, r.stdout)
				}
			}
			r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "-o", "json")
			if r.code != 0 {
				t.Fatalf("drift after apply: exit %d\n%s%s", r.code, r.stdout, r.err)
			}
			for _, m := range allMachines {
				if !strings.Contains(r.stdout, fmt.Sprintf("%q", m)) {
					t.Errorf("drift report lacks %s:\n%s", m, r.stdout)
				}
			}
			// and each machine's active config, read back through machinery's
			// client, holds the four documents with the patch's values
			ctx := context.Background()
			for _, m := range allMachines {
				if v := sf.Sim.Machine(m).Observe().TalosVersion; v != tc.talos {
					t.Errorf("%s runs %s, want %s", m, v, tc.talos)
				}
				c, err := sf.Dialer.Client(ctx, sf.Inventory.Machine(m))
				if err != nil {
					t.Fatal(err)
				}
				mc, err := safe.StateGetByID[*configres.MachineConfig](ctx, c.COSI, configres.ActiveID)
				c.Close() //nolint:errcheck
				if err != nil {
					t.Fatalf("%s: active MachineConfig: %v", m, err)
				}
				docs := map[string]string{}
				for _, d := range mc.Provider().Documents() {
					raw, err := encoder.NewEncoder(d, encoder.WithComments(encoder.CommentsDisabled)).Encode()
					if err != nil {
						t.Fatal(err)
					}
					docs[d.Kind()] = string(raw)
				}
				for kind, want := range map[string]string{
					"HostnameConfig": "hostname: " + m + "\n",
					"ResolverConfig": "- address: 1.0.0.1\n",
					"LinkConfig":     "mtu: 9000\n",
					"TimeSyncConfig": "- pool.ntp.org\n",
				} {
					if !strings.Contains(docs[kind], want) {
						t.Errorf("%s's active %s lacks %q:\n%s", m, kind, want, docs[kind])
					}
				}
			}
		})
	}
}
