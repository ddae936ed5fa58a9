package sim_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// Maintenance mode from Talos 1.13 is machined's own API behind apid,
// every insecure caller os:reader (v1.13.9 api_service_config.go
// ReadonlyRoleMode, authz.Injector ReadOnlyWithAdminOnSiderolink): Version
// answers; what os:reader may not call is "not authorized"; the config is
// applied "for maintenance only", a REBOOT apply as NO_REBOOT
// (v1alpha1_server.go ApplyConfiguration), a document kind the release
// lacks refused InvalidArgument. Up to 1.12 the maintenance server answers
// Version Unimplemented and every other method Unimplemented too.
func TestMaintenanceModeFrom113(t *testing.T) {
	_, cfg := baseConfigs(t) // Kubernetes 1.34.1, which 1.12 and 1.13 run
	f := start(t,
		sim.MachineSpec{Name: "m113", Role: "worker", TalosVersion: "v1.13.9"},
		sim.MachineSpec{Name: "m112", Role: "worker", TalosVersion: "v1.12.4"},
	)
	m113, m112 := f.Machine("m113"), f.Machine("m112")

	v, err := insecure(t, m113.Addr()).Version(t.Context())
	if err != nil || v.GetMessages()[0].GetVersion().GetTag() != "v1.13.9" || v.GetMessages()[0].GetFeatures() != nil {
		t.Fatalf("Version of a 1.13 machine in maintenance mode: %v, %v; want v1.13.9 without features", v, err)
	}
	if _, err := insecure(t, m112.Addr()).Version(t.Context()); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("Version of a 1.12 machine in maintenance mode: %v, want Unimplemented", err)
	}

	err = insecure(t, m113.Addr()).Reboot(t.Context())
	if client.StatusCode(err) != codes.PermissionDenied || !strings.Contains(err.Error(), "not authorized") {
		t.Errorf("Reboot of a 1.13 machine in maintenance mode: %v, want PermissionDenied not authorized", err)
	}
	if err := insecure(t, m112.Addr()).Reboot(t.Context()); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("Reboot of a 1.12 machine in maintenance mode: %v, want Unimplemented", err)
	}

	with114 := withDocs(cfg, "apiVersion: v1alpha1\nkind: DiscoveryServiceConfig\nname: default\nendpoint: https://discovery.talos.dev/")
	_, err = insecure(t, m113.Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: with114, Mode: machine.ApplyConfigurationRequest_AUTO})
	if client.StatusCode(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"DiscoveryServiceConfig" "v1alpha1": not registered`) {
		t.Errorf("a 1.14 document to a 1.13 machine in maintenance mode: %v, want InvalidArgument not registered", err)
	}

	dry, err := insecure(t, m113.Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_REBOOT, DryRun: true})
	if err != nil || dry.GetMessages()[0].GetMode() != machine.ApplyConfigurationRequest_NO_REBOOT ||
		!strings.HasPrefix(dry.GetMessages()[0].GetModeDetails(), "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n") {
		t.Fatalf("dry run of a REBOOT apply in maintenance mode: %v, %v", dry, err)
	}
	if m113.Configured() {
		t.Fatal("a dry run configured the machine")
	}

	reply, err := insecure(t, m113.Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_REBOOT})
	if err != nil || reply.GetMessages()[0].GetMode() != machine.ApplyConfigurationRequest_NO_REBOOT || reply.GetMessages()[0].GetModeDetails() != "Applied configuration without a reboot" {
		t.Fatalf("a REBOOT apply in maintenance mode: %v, %v; want NO_REBOOT", reply, err)
	}
	eventually(t, "m113 configured", func() error {
		if !m113.Configured() || m113.Observe().Down {
			return errors.New("not configured and up yet")
		}
		return nil
	})
}
