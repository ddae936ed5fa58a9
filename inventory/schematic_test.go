package inventory_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/inventory"
)

// A schematic's id is Image Factory's: the vectors of image-factory
// v0.9.0's own pkg/schematic tests (TestID, TestUnmarshalID), Talos'
// empty-schematic installer (pkg/images DefaultInstallerImageSchematic) and
// the widely published schematic of siderolabs/iscsi-tools with
// siderolabs/util-linux-tools.
func TestSchematicIDIsImageFactorys(t *testing.T) {
	for _, c := range []struct {
		name string
		s    *inventory.Schematic
		want string
	}{
		{"nil", nil, "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
		{"empty", &inventory.Schematic{}, "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
		{"empty lists", &inventory.Schematic{Customization: inventory.SchematicCustomization{ExtraKernelArgs: []string{}}}, "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"},
		{"kernel args", &inventory.Schematic{Customization: inventory.SchematicCustomization{ExtraKernelArgs: []string{"noapic", "nolapic"}}}, "9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c"},
		{"overlay", &inventory.Schematic{Overlay: &inventory.SchematicOverlay{Name: "rpi_generic", Image: "siderolabs/sbc-raspberrypi"}}, "ee21ef4a5ef808a9b7484cc0dda0f25075021691c8c09a276591eedb638ea1f9"},
		{"iscsi-tools and util-linux-tools", &inventory.Schematic{Customization: inventory.SchematicCustomization{SystemExtensions: inventory.SchematicExtensions{
			OfficialExtensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}}}}, "613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245"},
	} {
		if got := c.s.ID(); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// The installer of a machine: cluster.installImage when given (it wins),
// else its own schematic, its role's, the cluster's, from imageFactory.
func TestMachineInstallImage(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "inventory.yaml")
	write := func(body string) *inventory.Inventory {
		t.Helper()
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		inv, err := inventory.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return inv
	}
	const head = `apiVersion: devata.dev/v1alpha1
kind: Inventory
cluster:
  name: lab
  endpoint: https://10.20.0.10:6443
  talosVersion: v1.14.1
  kubernetesVersion: v1.37.0
  imageFactory: factory.lab.internal:5000
  schematic:
    customization: {extraKernelArgs: [noapic, nolapic]}
  workers:
    schematic:
      customization:
        systemExtensions: {officialExtensions: [siderolabs/iscsi-tools, siderolabs/util-linux-tools]}
`
	inv := write(head + `machines:
  - {name: cp-1, role: controlplane, address: 10.20.0.11, installDisk: /dev/sda}
  - {name: w-1, role: worker, address: 10.20.0.21, installDisk: /dev/sda}
  - {name: w-2, role: worker, address: 10.20.0.22, installDisk: /dev/sda, schematic: {}}
`)
	for name, want := range map[string]string{
		"cp-1": "factory.lab.internal:5000/metal-installer/9cba8e32753f91a16c1837ab8abf356af021706ef284aef07380780177d9a06c:v1.14.1",
		"w-1":  "factory.lab.internal:5000/metal-installer/613e1592b2da41ae5e265e8789429f22e121aab91cb4deb6bc3c0b6262961245:v1.14.1",
		"w-2":  "factory.lab.internal:5000/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.14.1",
	} {
		if got := inv.MachineInstallImage(inv.Machine(name)); got != want {
			t.Errorf("%s: %s, want %s", name, got, want)
		}
	}
	if got := inv.SchematicOf(inv.Machine("w-1")).Extensions(); strings.Join(got, ",") != "iscsi-tools,util-linux-tools" {
		t.Errorf("w-1's extensions: %v", got)
	}

	inv = write(strings.Replace(head, "  imageFactory:", "  installImage: registry.lab/talos/installer:v1.14.1\n  imageFactory:", 1) + `machines:
  - {name: cp-1, role: controlplane, address: 10.20.0.11, installDisk: /dev/sda}
`)
	if got := inv.MachineInstallImage(inv.Machine("cp-1")); got != "registry.lab/talos/installer:v1.14.1" {
		t.Errorf("with cluster.installImage: %s", got)
	}
	if len(inv.Warnings) == 0 || !strings.Contains(strings.Join(inv.Warnings, "\n"), "this schematic is not used") {
		t.Errorf("no warning that installImage wins: %q", inv.Warnings)
	}
}
