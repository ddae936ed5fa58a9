package sim_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"devata.dev/devata/sim"
)

// TestUnattendedInstallRetries follows v1.14.1's
// UnattendedInstallController (controllers/runtime/unattended_install.go
// reconcile): a 1.14 machine given, in maintenance mode, a config whose
// UnattendedInstallConfig names an installer the registry does not have
// keeps the config (it answers over mTLS, not in maintenance mode), reports
// the phase failed with the pull's error in UnattendedInstallStatus, and
// once the installer exists installs it on a retry (the controller's
// restart backoff) and reboots into it with the config.
func TestUnattendedInstallRetries(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Role: "worker", TalosVersion: "v1.14.1"})
	m := f.Machine("w-1")

	image := factoryInstallerOf(unknownSchematic, "v1.14.1")
	cfg := append(patch(t, wk, `[{"op": "remove", "path": "/machine/install"}]`), fmt.Sprintf(`---
apiVersion: v1alpha1
kind: UnattendedInstallConfig
installer:
  image: %s
provisioning:
  diskSelector:
    match: disk.dev_path == "/dev/sda"
`, image)...)

	if _, err := insecure(t, m.Addr()).ApplyConfiguration(ctxTimeout(t, 5*time.Second), &machine.ApplyConfigurationRequest{Data: cfg, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatalf("maintenance apply: %v", err)
	}

	statusOf := func() (*runtime.UnattendedInstallStatus, error) {
		return safe.StateGet[*runtime.UnattendedInstallStatus](ctxTimeout(t, time.Second), admin(t, m.Addr()).COSI,
			runtime.NewUnattendedInstallStatus().Metadata())
	}

	var failed *runtime.UnattendedInstallStatus

	until(t, "w-1 reports the unattended install failed", func() (bool, error) {
		st, err := statusOf()
		if err != nil {
			return false, err
		}

		failed = st

		return st.TypedSpec().Phase == runtime.UnattendedInstallPhaseFailed, nil
	})

	if spec := failed.TypedSpec(); spec.Image != image || spec.Error == "" {
		t.Errorf("failed status: image %q error %q, want image %q and the pull's error", spec.Image, spec.Error, image)
	}

	if obs := m.Observe(); obs.Reboots != 0 || obs.InstallImage == image || !m.Configured() {
		t.Errorf("after the failed install: %+v, configured %v; want no reboot, nothing installed, the config kept", obs, m.Configured())
	}

	// a retry later, still failing: the machine keeps its config
	time.Sleep(time.Second)

	if obs := m.Observe(); obs.Reboots != 0 || !m.Configured() {
		t.Errorf("a second later: %+v, configured %v; want no reboot, the config kept", obs, m.Configured())
	}

	f.CreateSchematic(unknownSchematic, sim.Schematic{})

	until(t, "w-1 installed on a retry and rebooted", func() (bool, error) {
		obs := m.Observe()

		return obs.Reboots > 0 && !obs.Down && obs.InstallImage == image, nil
	})

	until(t, "w-1 up with its config after the install", func() (bool, error) {
		st, err := statusOf()
		if err != nil {
			return false, err
		}

		return st.TypedSpec().Phase == runtime.UnattendedInstallPhaseInstalled && m.Configured(), nil
	})
}
