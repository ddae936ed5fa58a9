package inventory_test

import (
	"os"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
)

// A pre-release of the next Talos is accepted, with a warning that says
// what devata does with it.
func TestTalosPreReleaseWarns(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/inventory.yaml"
	writeFile(t, path, `apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster:
  name: lab
  endpoint: https://10.20.0.10:6443
  talosVersion: v1.15.0-beta.1
  kubernetesVersion: v1.37.0
machines:
  - {name: cp-1, role: controlplane, address: 10.20.0.11, installDisk: /dev/sda}
`)
	inv, err := inventory.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(inv.Warnings) != 1 || !strings.Contains(inv.Warnings[0], "pre-release of Talos 1.15") || !strings.Contains(inv.Warnings[0], "spoken to as 1.14") {
		t.Errorf("warnings = %q", inv.Warnings)
	}
	if want := "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.15.0-beta.1"; inv.Cluster.InstallImage != want {
		t.Errorf("default installer %s, want %s", inv.Cluster.InstallImage, want)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
