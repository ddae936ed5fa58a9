package sim_test

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// A machine refuses a config holding a document kind its own Talos does
// not register, as each release's configloader does (config/internal/
// registry New: "not registered"; from machinery v1.12.4 the decoder names
// the document and its line), in the code each machined answers with: a
// configured node InvalidArgument (v1alpha1_server.go ApplyConfiguration),
// Talos 1.11's maintenance service Unknown "failed to parse config". A
// machine of the release that introduced the kind takes it.
func TestMachinesRefuseKindsOfALaterTalos(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	link := patch(t, cp, "apiVersion: v1alpha1\nkind: LinkConfig\nname: enp1s0\nup: true\n")
	module := patch(t, cp, "apiVersion: v1alpha1\nkind: KernelModuleConfig\nname: nbd\n")

	f := start(t,
		sim.MachineSpec{Name: "on-1.11", Role: "controlplane", Config: cp, TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "on-1.13", Role: "controlplane", Config: cp, TalosVersion: "v1.13.9"},
		sim.MachineSpec{Name: "on-1.14", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "fresh-1.11", Role: "controlplane", TalosVersion: "v1.11.0"},
	)

	dryRun := func(name string, data []byte) error {
		_, err := admin(t, f.Machine(name).Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: data, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})

		return err
	}

	wantCode(t, "a LinkConfig on 1.11", dryRun("on-1.11", link), codes.InvalidArgument, `"LinkConfig" "v1alpha1": not registered`)
	wantCode(t, "a KernelModuleConfig on 1.13", dryRun("on-1.13", module), codes.InvalidArgument, `error decoding document v1alpha1/KernelModuleConfig/nbd (line `)

	if err := dryRun("on-1.13", link); err != nil {
		t.Errorf("a LinkConfig on 1.13 (it came with 1.12): %v", err)
	}

	if err := dryRun("on-1.14", module); err != nil {
		t.Errorf("a KernelModuleConfig on 1.14 (it came with 1.14): %v", err)
	}

	_, err := insecure(t, f.Machine("fresh-1.11").Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: link, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	wantCode(t, "a LinkConfig to 1.11 in maintenance mode", err, codes.Unknown, `failed to parse config: "LinkConfig" "v1alpha1": not registered`)
}
