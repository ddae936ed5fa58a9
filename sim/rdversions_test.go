package sim_test

import (
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// A machine serves the resource definitions its release registers
// (v1alpha2_state.go NewState of each tag): ImageFactorySchematic only
// from 1.14, so a 1.13 machine neither lists its definition nor serves a
// read of it (the access policy's "not supported"), while a 1.14 one does.
func TestResourceDefinitionsPerRelease(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "m-113", Role: "controlplane", Config: cp, TalosVersion: "v1.13.9"},
		sim.MachineSpec{Name: "m-114", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
	)

	for name, want := range map[string]bool{"m-113": false, "m-114": true} {
		c := admin(t, f.Machine(name).Addr())
		rds, err := safe.StateListAll[*meta.ResourceDefinition](t.Context(), c.COSI)
		if err != nil {
			t.Fatalf("%s: list resource definitions: %v", name, err)
		}
		has, n := false, 0
		for rd := range rds.All() {
			n++
			if rd.Metadata().ID() == "imagefactoryschematics.runtime.talos.dev" {
				has = true
			}
		}
		if has != want || n < 100 {
			t.Errorf("%s: %d definitions, ImageFactorySchematic's listed %v; want %v", name, n, has, want)
		}

		_, err = safe.StateListAll[*runtime.ImageFactorySchematic](t.Context(), c.COSI)
		if got := client.StatusCode(err) == codes.PermissionDenied; got == want {
			t.Errorf("%s: list ImageFactorySchematic: %v", name, err)
		}
	}
}
