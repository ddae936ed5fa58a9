package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/talos"
	"devata.dev/devata/sim"
)

// A schematic the simulated Image Factory holds, and one it does not.
var (
	storageSchematic = strings.Repeat("5c", 32)
	unknownSchematic = strings.Repeat("0d", 32)
)

func factoryInstallerOf(id, version string) string {
	return "factory.talos.dev/metal-installer/" + id + ":" + version
}

// bootOf is what a machine reports of its booted image: the extension
// names by ExtensionStatus id, the schematic extension's version, the
// kernel command line, and the ImageFactorySchematic's id ("" when there
// is none).
type bootOf struct {
	extensions []string
	schematic  string
	cmdline    string
	factory    string
}

func readBoot(t *testing.T, c *client.Client) (bootOf, error) {
	t.Helper()

	ctx := ctxTimeout(t, 2*time.Second)

	var b bootOf

	list, err := safe.StateListAll[*runtime.ExtensionStatus](ctx, c.COSI)
	if err != nil {
		return b, err
	}

	i := -1
	for es := range list.All() {
		i++

		if want := fmt.Sprint(i); es.Metadata().ID() != want || es.TypedSpec().Image != want+".sqsh" {
			t.Errorf("ExtensionStatus %d is %s (image %s), want %s from layer %s.sqsh", i, es.Metadata().ID(), es.TypedSpec().Image, want, want)
		}

		md := es.TypedSpec().Metadata
		if md.Name == "schematic" {
			b.schematic = md.Version

			continue
		}

		b.extensions = append(b.extensions, md.Name)
	}

	cmdline, err := safe.StateGet[*runtime.KernelCmdline](ctx, c.COSI, resource.NewMetadata(runtime.NamespaceName, runtime.KernelCmdlineType, runtime.KernelCmdlineID, resource.VersionUndefined))
	if err != nil {
		return b, err
	}

	b.cmdline = cmdline.TypedSpec().Cmdline

	ifs, err := safe.StateGet[*runtime.ImageFactorySchematic](ctx, c.COSI, runtime.NewImageFactorySchematic(runtime.NamespaceName, runtime.ImageFactorySchematicID).Metadata())

	switch {
	case state.IsNotFoundError(err) || client.StatusCode(err) == codes.NotFound:
	case client.StatusCode(err) == codes.PermissionDenied && strings.Contains(err.Error(), "is not supported"):
		// before 1.14 the type is not registered (rdversions.go)
	case err != nil:
		return b, err
	default:
		b.factory = ifs.TypedSpec().SchematicID
	}

	return b, nil
}

// What a machine reports of its boot image after an installer of a
// schematic wrote it: an ExtensionStatus per official extension in the
// schematic's order, then Image Factory's virtual "schematic" extension
// with the schematic id as its version (controllers/runtime
// extension_status.go, image-factory v0.9.0 internal/artifacts
// schematic.go); KernelCmdline with the schematic's extra arguments after
// the version's defaults; from 1.14 the ImageFactorySchematic resource
// (controllers/runtime/image_factory_schematic.go). An installer of a
// schematic the factory does not hold is not found, and the machine keeps
// what it booted.
func TestSchematicInstallers(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		Schematics: map[string]sim.Schematic{
			storageSchematic: {Extensions: []string{"siderolabs/iscsi-tools", "siderolabs/util-linux-tools"}, KernelArgs: []string{"net.ifnames=0"}},
		},
		Machines: []sim.MachineSpec{
			{Name: "w-113", Config: wk, TalosVersion: "v1.13.9"},
			{Name: "w-114", Config: wk, TalosVersion: "v1.14.1"},
		},
	})

	for _, tc := range []struct {
		name, version string
		factory       bool // ImageFactorySchematic served
	}{
		{"w-113", "v1.13.9", false},
		{"w-114", "v1.14.1", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()

			m := f.Machine(tc.name)
			c := admin(t, m.Addr())

			// booted from the version's default installer: ghcr.io's for
			// 1.13 (no schematic at all), the Image Factory's empty
			// schematic for 1.14; no extensions, the version's default
			// kernel arguments
			before, err := readBoot(t, c)
			if err != nil {
				t.Fatalf("read boot image: %v", err)
			}

			wantBefore := ""
			if tc.factory {
				wantBefore = talos.EmptySchematicID
			}

			if len(before.extensions) != 0 || before.schematic != wantBefore || before.factory != wantBefore ||
				!strings.HasPrefix(before.cmdline, "talos.platform=metal ") || strings.Contains(before.cmdline, "net.ifnames=0") {
				t.Errorf("booted from %s: %+v, want no extensions, schematic %q, the default command line", m.Observe().InstallImage, before, wantBefore)
			}

			// a schematic the factory does not hold: its registry answers
			// not found, machined refuses the upgrade and nothing changes
			unknown := factoryInstallerOf(unknownSchematic, tc.version)
			_, err = upgrade(t, c, &machine.UpgradeRequest{Image: unknown})
			wantStatus(t, "upgrade to an unknown schematic", err, codes.Unknown,
				fmt.Sprintf("error validating installer image %q: 1 error(s) occurred:\n\tfailed to pull image %q: failed to resolve reference %q: %s: not found", unknown, unknown, unknown, unknown))

			if obs := m.Observe(); obs.Upgrading || obs.NextVersion != "" || obs.Reboots != 0 {
				t.Errorf("after the refused upgrade: %+v, want nothing changed", obs)
			}

			// a reinstall at the same version from the schematic's installer
			image := factoryInstallerOf(storageSchematic, tc.version)
			if _, err := upgrade(t, c, &machine.UpgradeRequest{Image: image}); err != nil {
				t.Fatalf("upgrade to %s: %v", image, err)
			}

			until(t, tc.name+" back from "+image, func() (bool, error) {
				obs := m.Observe()
				if obs.Down || obs.InstallImage != image {
					return false, nil
				}

				got, err := tag(t, c)

				return got == tc.version, err
			})

			var after bootOf

			eventually(t, "the boot image read", func() error {
				after, err = readBoot(t, c)

				return err
			})

			if !slices.Equal(after.extensions, []string{"iscsi-tools", "util-linux-tools"}) || after.schematic != storageSchematic {
				t.Errorf("ExtensionStatus after the reinstall: %v, schematic %q; want iscsi-tools, util-linux-tools and schematic %s", after.extensions, after.schematic, storageSchematic)
			}

			if !strings.HasSuffix(after.cmdline, " net.ifnames=0") || !strings.HasPrefix(after.cmdline, before.cmdline) {
				t.Errorf("KernelCmdline after the reinstall %q, want %q then net.ifnames=0", after.cmdline, before.cmdline)
			}

			if want := map[bool]string{true: storageSchematic}[tc.factory]; after.factory != want {
				t.Errorf("ImageFactorySchematic = %q, want %q (Talos %s)", after.factory, want, tc.version)
			}
		})
	}
}

// Every Image Factory installer carries the virtual schematic extension,
// the empty schematic's too (image-factory v0.9.0 EnhanceFromSchematic
// adds it whatever the schematic holds).
func TestEmptySchematicInstaller(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"})
	m := f.Machine("w-1")
	c := admin(t, m.Addr())

	image := talos.DefaultInstallImage("v1.14.1")
	if _, err := upgrade(t, c, &machine.UpgradeRequest{Image: image}); err != nil {
		t.Fatalf("upgrade to %s: %v", image, err)
	}

	until(t, "w-1 back from "+image, func() (bool, error) {
		obs := m.Observe()

		return !obs.Down && obs.InstallImage == image && obs.Reboots > 0, nil
	})

	var b bootOf

	eventually(t, "the boot image read", func() error {
		var err error
		b, err = readBoot(t, c)

		return err
	})

	if len(b.extensions) != 0 || b.schematic != talos.EmptySchematicID || b.factory != talos.EmptySchematicID {
		t.Errorf("booted from %s: %+v, want only the schematic extension of the empty schematic", image, b)
	}
}

// A maintenance-mode machine given a config whose installer cannot be
// pulled accepts the config (the maintenance server validates, then hands
// it to the install sequence), fails the install and comes back in
// maintenance mode without a config: nothing was written to its disk.
func TestMaintenanceInstallOfUnknownSchematic(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Role: "worker", TalosVersion: "v1.14.1"})
	m := f.Machine("w-1")
	c := insecure(t, m.Addr())

	cfg := patch(t, wk, fmt.Sprintf(`machine: {install: {image: %q}}`, factoryInstallerOf(unknownSchematic, "v1.14.1")))
	if _, err := c.ApplyConfiguration(ctxTimeout(t, 5*time.Second), &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatalf("maintenance apply: %v", err)
	}

	until(t, "w-1 rebooted", func() (bool, error) {
		obs := m.Observe()

		return obs.Reboots > 0 && !obs.Down, nil
	})

	until(t, "w-1 in maintenance mode again", func() (bool, error) {
		st, _, err := stage(t, insecure(t, m.Addr()))

		return st == runtime.MachineStageMaintenance, err
	})

	if obs := m.Observe(); obs.InstallImage == factoryInstallerOf(unknownSchematic, "v1.14.1") {
		t.Errorf("after the failed install: %+v, want the unknown installer not recorded as installed", obs)
	}
}
