package inventory_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/constants"

	"devata.dev/devata/inventory"
)

// The support table is held to machinery v1.14.1's own data: each
// release's Kubernetes window is exactly what compatibility allows (its
// ends in, the minors beyond them out), the newest release's default
// Kubernetes is constants.DefaultKubernetesVersion, and every document
// kind the table dates is one machinery registers.
func TestSupportTable(t *testing.T) {
	if n := len(inventory.TalosReleases); n != inventory.NewestTalosMinor-inventory.OldestTalosMinor+1 {
		t.Fatalf("%d releases in the table for 1.%d to 1.%d", n, inventory.OldestTalosMinor, inventory.NewestTalosMinor)
	}
	supported := func(talos, kube string) bool {
		tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
		if err != nil {
			t.Fatal(err)
		}
		kv, err := compatibility.ParseKubernetesVersion(kube)
		if err != nil {
			t.Fatal(err)
		}
		return kv.SupportedWith(tv) == nil
	}
	minor := func(v string, delta int) string {
		var maj, min int
		fmt.Sscanf(v, "%d.%d", &maj, &min)
		return fmt.Sprintf("%d.%d.0", maj, min+delta)
	}
	for _, r := range inventory.TalosReleases {
		talos := fmt.Sprintf("v1.%d.0", r.Minor)
		oldest, newest := r.Kubernetes[0], r.Kubernetes[1]
		for _, c := range []struct {
			kube string
			want bool
		}{
			{minor(oldest, 0), true}, {minor(newest, 0), true},
			{minor(oldest, -1), false}, {minor(newest, 1), false},
		} {
			if got := supported(talos, c.kube); got != c.want {
				t.Errorf("Talos 1.%d with Kubernetes %s: machinery says supported=%t, the table %t", r.Minor, c.kube, got, c.want)
			}
		}
		if rel, ok := inventory.TalosReleaseOf(talos); !ok || rel.Minor != r.Minor {
			t.Errorf("TalosReleaseOf(%s) = %+v, %t", talos, rel, ok)
		}
	}
	newest := inventory.TalosReleases[len(inventory.TalosReleases)-1]
	if newest.DefaultKubernetes != constants.DefaultKubernetesVersion {
		t.Errorf("Talos 1.%d defaults to Kubernetes %s in the table, machinery %s", newest.Minor, newest.DefaultKubernetes, constants.DefaultKubernetesVersion)
	}
	perRelease := map[int]int{}
	for kind, since := range inventory.DocumentKinds {
		perRelease[since]++
		_, err := configloader.NewFromBytes([]byte("apiVersion: v1alpha1\nkind: " + kind + "\n"))
		if err != nil && strings.Contains(err.Error(), "not registered") {
			t.Errorf("%s (Talos 1.%d in the table): machinery v1.14.1 does not register it: %v", kind, since, err)
		}
	}
	// counted in each release's registry.Register calls
	for minor, want := range map[int]int{11: 17, 12: 19, 13: 8, 14: 45} {
		if perRelease[minor] != want {
			t.Errorf("Talos 1.%d: %d kinds in the table, %d registered", minor, perRelease[minor], want)
		}
	}
	if _, err := configloader.NewFromBytes([]byte("apiVersion: v1alpha1\nkind: NoSuchConfig\n")); err == nil || !strings.Contains(err.Error(), "not registered") {
		t.Errorf("the registration probe does not tell: %v", err)
	}
}

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

func TestDefaultInstallImage(t *testing.T) {
	for v, want := range map[string]string{
		"v1.11.0": "ghcr.io/siderolabs/installer:v1.11.0",
		"v1.13.9": "ghcr.io/siderolabs/installer:v1.13.9",
		"v1.14.1": "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
	} {
		if got := inventory.DefaultInstallImage(v); got != want {
			t.Errorf("DefaultInstallImage(%s) = %s, want %s", v, got, want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
