package sim_test

import (
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/resource/meta"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"
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
		has, n, since114 := false, 0, 0
		for rd := range rds.All() {
			n++
			switch rd.Metadata().ID() {
			case "imagefactoryschematics.runtime.talos.dev":
				has = true
			case "kubeletstatuses.kubernetes.talos.dev", "ntpstatuses.v1alpha1.talos.dev", "unattendedinstallstatuses.runtime.talos.dev":
				since114++
			}
		}
		if (since114 == 3) != want || (since114 == 0) == want {
			t.Errorf("%s: %d of the definitions of KubeletStatus, NTPStatus and UnattendedInstallStatus listed; want them listed %v", name, since114, want)
		}
		if has != want || n < 100 {
			t.Errorf("%s: %d definitions, ImageFactorySchematic's listed %v; want %v", name, n, has, want)
		}

		_, err = safe.StateListAll[*runtime.ImageFactorySchematic](t.Context(), c.COSI)
		if got := client.StatusCode(err) == codes.PermissionDenied; got == want {
			t.Errorf("%s: list ImageFactorySchematic: %v", name, err)
		}

		// KubeletStatus and NTPStatus came with 1.14 too, with their spec
		// shapes (machinery resources/k8s/kubelet_status.go,
		// resources/time/ntp_status.go)
		ks, err := safe.StateGetByID[*k8s.KubeletStatus](t.Context(), c.COSI, k8s.KubeletID)
		switch {
		case !want && client.StatusCode(err) != codes.PermissionDenied:
			t.Errorf("%s: KubeletStatus: %v, want refused as machined's access policy refuses an unregistered type", name, err)
		case want && (err != nil || !strings.HasPrefix(ks.TypedSpec().Image, "ghcr.io/siderolabs/kubelet:v")):
			t.Errorf("%s: KubeletStatus: %v, %v; want the kubelet's image", name, ks, err)
		}

		ntp, err := safe.StateGetByID[*timeres.NTPStatus](t.Context(), c.COSI, timeres.NTPStatusID)
		switch {
		case !want && client.StatusCode(err) != codes.PermissionDenied:
			t.Errorf("%s: NTPStatus: %v, want refused", name, err)
		case want && (err != nil || ntp.TypedSpec().SpikeDetected || ntp.TypedSpec().ConsecutiveSpikes != 0):
			t.Errorf("%s: NTPStatus: %v, %v; want no spike", name, ntp, err)
		}
	}
}
