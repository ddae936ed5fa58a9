package sim_test

import (
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/sim"
)

// A maintenance apply replies, then the node installs and reboots
// (v1.11.0 internal/app/maintenance/server.go ApplyConfiguration hands the
// config over only after it built the reply; v1.14.1 v1alpha1_server.go
// ApplyConfiguration replies before the boot sequence it completes
// reboots). On Talos the reboot takes far longer than the reply, so the
// caller always gets it. The sim's reboot may be as short as a test asks
// (here a nanosecond): the reply must still arrive, not "Unavailable …
// EOF" from the connection dropped under it.
func TestAMaintenanceApplyRepliesHoweverShortTheReboot(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)

	for i := range 5 {
		f := startWith(t, sim.Options{RebootDelay: time.Nanosecond, Machines: []sim.MachineSpec{{Name: "cp-1", Role: "controlplane"}}})
		c := insecure(t, f.Machine("cp-1").Addr())

		if _, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
			t.Fatalf("apply %d: %v, want its reply", i, err)
		}
	}
}
