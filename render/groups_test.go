package render_test

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// groupsInventory writes an inventory with a storage group (a disk patch, a
// label, a taint) and a rack group, for Talos version tv.
func groupsInventory(t *testing.T, tv, kv string) *inventory.Inventory {
	t.Helper()
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/groups")); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "inventory.yaml")
	data := fmt.Sprintf(`apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster: {name: lab, endpoint: "https://10.0.0.10:6443", talosVersion: %s, kubernetesVersion: %s}
groups:
  - name: storage
    selector: {matchLabels: {node.kubernetes.io/storage: "true"}}
    patches: [patches/storage-disk.yaml]
    labels: {storage.example.com/pool: a}
    taints: {storage.example.com/dedicated: "true:NoSchedule"}
    viaKubernetes: {labels: {node-role.kubernetes.io/storage: ""}, taints: {node-restriction.kubernetes.io/storage: NoSchedule}}
    rollout: {maxUnavailable: 1}
  - name: rack-a
    selector: {matchLabels: {topology.kubernetes.io/zone: rack-a}}
    patches: [patches/rack-a.yaml]
machines:
  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda, labels: {node.kubernetes.io/storage: "true", topology.kubernetes.io/zone: rack-a}}
  - {name: cp-2, role: controlplane, address: 10.0.0.21, installDisk: /dev/sda, patches: [patches/w-1.yaml], labels: {topology.kubernetes.io/zone: rack-a}, taints: {example.com/own: NoExecute}}
  - {name: cp-3, role: controlplane, address: 10.0.0.22, installDisk: /dev/sda, viaKubernetes: {labels: {example.com/api-only: "yes"}, taints: {example.com/api-only: NoExecute}}}
`, tv, kv)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// A group's patches apply after the role's and before the machine's, in
// the groups' order; its labels and taints render where each contract
// keeps them (machine.nodeLabels/nodeTaints up to 1.13, KubeNodeConfig from
// 1.14). viaKubernetes labels and taints, which devata writes through the
// Kubernetes API, are in no config.
func TestRenderGroups(t *testing.T) {
	for _, c := range []struct{ talos, kube string }{{"v1.11.0", "v1.34.1"}, {"v1.14.1", "v1.37.0"}} {
		t.Run(c.talos, func(t *testing.T) {
			inv := groupsInventory(t, c.talos, c.kube)
			b, err := render.LoadSecrets("testdata/secrets.yaml")
			if err != nil {
				t.Fatal(err)
			}
			out, err := render.Validated(inv, b)
			if err != nil {
				t.Fatal(err)
			}
			byName := map[string]*render.Rendered{}
			for _, r := range out {
				byName[r.Machine] = r
			}
			if got, want := byName["cp-1"].Patches, []string{"patches/storage-disk.yaml", "patches/rack-a.yaml"}; !slices.Equal(got, want) {
				t.Errorf("cp-1 patch order %v, want %v", got, want)
			}
			if got, want := byName["cp-2"].Patches, []string{"patches/rack-a.yaml", "patches/w-1.yaml"}; !slices.Equal(got, want) {
				t.Errorf("cp-2 patch order %v, want %v", got, want)
			}
			for name, want := range map[string]struct {
				sysctls map[string]string
				labels  map[string]string
				taints  map[string]string
			}{
				// rack-a (later) wins over storage; the machine's own patch over both
				"cp-1": {map[string]string{"vm.dirty_ratio": "20", "net.core.somaxconn": "4096"},
					map[string]string{"storage.example.com/pool": "a", "node.kubernetes.io/storage": "true", "topology.kubernetes.io/zone": "rack-a"},
					map[string]string{"storage.example.com/dedicated": "true:NoSchedule"}},
				"cp-2": {map[string]string{"vm.dirty_ratio": "20", "net.core.somaxconn": "8192"},
					map[string]string{"topology.kubernetes.io/zone": "rack-a"},
					map[string]string{"example.com/own": "NoExecute"}},
				"cp-3": {map[string]string{}, map[string]string{}, map[string]string{}},
			} {
				for _, key := range []string{"node-role.kubernetes.io/storage", "node-restriction.kubernetes.io/storage", "example.com/api-only"} {
					if bytes.Contains(byName[name].Config, []byte(key)) {
						t.Errorf("%s's config carries %s, a viaKubernetes key", name, key)
					}
				}
				cfg, err := configloader.NewFromBytes(byName[name].Config)
				if err != nil {
					t.Fatal(err)
				}
				sysctls := map[string]string{}
				for k, v := range cfg.Machine().Sysctls() {
					if k == "vm.dirty_ratio" || k == "net.core.somaxconn" {
						sysctls[k] = v
					}
				}
				if !maps.Equal(sysctls, want.sysctls) {
					t.Errorf("%s sysctls %v, want %v", name, sysctls, want.sysctls)
				}
				labels := maps.Clone(cfg.K8sNodeConfig().Labels())
				// the provider's own on control planes
				delete(labels, "node.kubernetes.io/exclude-from-external-load-balancers")
				delete(labels, "node-role.kubernetes.io/control-plane")
				if len(labels) == 0 {
					labels = map[string]string{}
				}
				if !maps.Equal(labels, want.labels) {
					t.Errorf("%s labels %v, want %v", name, labels, want.labels)
				}
				taints := maps.Clone(cfg.K8sNodeConfig().Taints())
				delete(taints, "node-role.kubernetes.io/control-plane")
				if len(taints) == 0 {
					taints = map[string]string{}
				}
				if !maps.Equal(taints, want.taints) {
					t.Errorf("%s taints %v, want %v", name, taints, want.taints)
				}
			}
		})
	}
}
