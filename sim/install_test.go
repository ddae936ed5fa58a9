package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/sim"
)

// TestInstallVersion follows Talos v1.11.0's boot sequence Install task
// (v1alpha1_sequencer_tasks.go Install): a config applied in maintenance
// mode to a machine whose disk holds no install runs its installer image,
// and the machine reboots into the installer's version, not the install
// medium's; a machine whose STATE alone was wiped is still installed, skips
// the install and keeps its version; a reset of the whole system disk loses
// the install.
func TestInstallVersion(t *testing.T) {
	t.Parallel()

	_, worker := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "worker-1", TalosVersion: "v1.11.2"})
	addr := f.Machine("worker-1").Addr()

	withInstaller := func(tag string) []byte {
		return patch(t, worker, `machine: {install: {image: ghcr.io/siderolabs/installer:`+tag+`}}`)
	}
	// join applies cfg in maintenance mode and returns the version the
	// machine reports once it is back on mTLS.
	join := func(cfg []byte) string {
		t.Helper()

		if _, err := insecure(t, addr).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
			t.Fatalf("apply: %v", err)
		}

		var tag string

		eventually(t, "the machine answers Version over mTLS", func() error {
			v, err := admin(t, addr).Version(ctxTimeout(t, time.Second))
			if err != nil {
				return err
			}

			tag = v.GetMessages()[0].GetVersion().GetTag()

			return nil
		})

		return tag
	}
	reset := func(req *machine.ResetRequest) {
		t.Helper()

		if err := admin(t, addr).ResetGeneric(t.Context(), req); err != nil {
			t.Fatalf("reset: %v", err)
		}

		eventually(t, "the machine is back in maintenance mode", func() error {
			if _, err := insecure(t, addr).ApplyConfiguration(ctxTimeout(t, time.Second), &machine.ApplyConfigurationRequest{Data: worker, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true}); err != nil {
				return fmt.Errorf("maintenance dry run: %w", err)
			}

			return nil
		})
	}

	if got := join(withInstaller("v1.11.0")); got != "v1.11.0" {
		t.Errorf("booted v1.11.2 from its medium, installed from installer:v1.11.0: runs %s, want v1.11.0", got)
	}

	reset(&machine.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "STATE", Wipe: true}}})

	if got := join(withInstaller("v1.11.2")); got != "v1.11.0" {
		t.Errorf("STATE wiped, still installed: runs %s after a config naming installer:v1.11.2, want v1.11.0 (no install)", got)
	}

	reset(&machine.ResetRequest{Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK})

	if got := join(withInstaller("v1.11.2")); got != "v1.11.2" {
		t.Errorf("whole system disk wiped: runs %s after a config naming installer:v1.11.2, want v1.11.2", got)
	}
}
