package sim_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"devata.dev/devata/sim"
)

const (
	// a live change: node labels apply without a reboot
	labelPatch = "machine:\n  nodeLabels:\n    topology.kubernetes.io/zone: rack-a\n"
	// a change that needs a reboot: machine.env is not live
	envPatch = "machine:\n  env:\n    GRPC_GO_LOG_SEVERITY_LEVEL: info\n"
)

// activeAndPersisted reads both MachineConfig resources and reports whether
// each equals want.
func activeAndPersisted(t *testing.T, c *client.Client, want []byte) (active, persisted bool) {
	t.Helper()

	active, persisted, err := configState(t, c, want)
	if err != nil {
		t.Fatal(err)
	}

	return active, persisted
}

func configState(t *testing.T, c *client.Client, want []byte) (active, persisted bool, err error) {
	t.Helper()

	wantCfg, err := configloader.NewFromBytes(want)
	if err != nil {
		t.Fatal(err)
	}

	same := func(id string) (bool, error) {
		mc, err := safe.StateGet[*config.MachineConfig](ctxTimeout(t, time.Second), c.COSI, config.NewMachineConfigWithID(nil, id).Metadata())
		if err != nil {
			return false, fmt.Errorf("get MachineConfig %s: %w", id, err)
		}

		diff, err := configdiff.DiffConfigs(wantCfg, mc.Provider())

		return diff == "", err
	}

	if active, err = same(config.ActiveID); err != nil {
		return false, false, err
	}

	persisted, err = same(config.PersistentID)

	return active, persisted, err
}

// configIs is for eventually: nil once the active (and, if asked, the
// persisted) config equals want.
func configIs(t *testing.T, c *client.Client, want []byte, alsoPersisted bool) func() error {
	return func() error {
		active, persisted, err := configState(t, c, want)

		switch {
		case err != nil:
			return err
		case !active, alsoPersisted && !persisted:
			return fmt.Errorf("active config applied: %t, persisted: %t", active, persisted)
		}

		return nil
	}
}

func apply(t *testing.T, c *client.Client, cfg []byte, mode machine.ApplyConfigurationRequest_Mode, dryRun bool) (*machine.ApplyConfiguration, error) {
	t.Helper()

	resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cfg, Mode: mode, DryRun: dryRun})
	if err != nil {
		return nil, err
	}

	if len(resp.Messages) != 1 {
		t.Fatalf("got %d messages, want 1", len(resp.Messages))
	}

	return resp.Messages[0], nil
}

func TestApplyDryRun(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	m := f.Machine("cp-1")
	c := admin(t, m.Addr())

	labels := patch(t, cp, labelPatch)
	env := patch(t, cp, envPatch)

	for _, tc := range []struct {
		name        string
		cfg         []byte
		mode        machine.ApplyConfigurationRequest_Mode
		wantMode    machine.ApplyConfigurationRequest_Mode
		wantPrefix  string
		wantContain string
		wantCode    codes.Code
	}{
		{
			name: "no changes", cfg: cp, mode: machine.ApplyConfigurationRequest_AUTO, wantMode: machine.ApplyConfigurationRequest_NO_REBOOT,
			wantPrefix: "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\nNo changes.",
		},
		{
			name: "live change", cfg: labels, mode: machine.ApplyConfigurationRequest_AUTO, wantMode: machine.ApplyConfigurationRequest_NO_REBOOT,
			wantPrefix: "Dry run summary:\nApplied configuration without a reboot (skipped in dry-run).\nConfig diff:\n\n", wantContain: "+        topology.kubernetes.io/zone: rack-a",
		},
		{
			name: "reboot change", cfg: env, mode: machine.ApplyConfigurationRequest_AUTO, wantMode: machine.ApplyConfigurationRequest_REBOOT,
			wantPrefix: "Dry run summary:\nApplied configuration with a reboot (skipped in dry-run).\nConfig diff:\n\n", wantContain: "GRPC_GO_LOG_SEVERITY_LEVEL",
		},
		{
			name: "staged", cfg: env, mode: machine.ApplyConfigurationRequest_STAGED, wantMode: machine.ApplyConfigurationRequest_STAGED,
			wantPrefix: "Dry run summary:\nStaged configuration to be applied after the next reboot (skipped in dry-run).\n",
		},
		{name: "no-reboot refuses a reboot change", cfg: env, mode: machine.ApplyConfigurationRequest_NO_REBOOT, wantCode: codes.InvalidArgument},
		{name: "invalid config", cfg: []byte("version: v1alpha1\nmachine:\n  type: nonsense\n"), mode: machine.ApplyConfigurationRequest_AUTO, wantCode: codes.InvalidArgument},
		// v1alpha1_server.go ApplyConfiguration: RuntimeValidate refuses
		// Kubernetes this Talos does not support (ValidateKubernetesImageTag)
		{name: "kubelet unsupported by Talos 1.11", cfg: patch(t, cp, `machine: {kubelet: {image: ghcr.io/siderolabs/kubelet:v1.28.0}}`), mode: machine.ApplyConfigurationRequest_AUTO, wantCode: codes.InvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg, err := apply(t, c, tc.cfg, tc.mode, true)
			if client.StatusCode(err) != tc.wantCode {
				t.Fatalf("apply: %v, want %s", err, tc.wantCode)
			}

			if err != nil {
				return
			}

			if msg.Mode != tc.wantMode {
				t.Errorf("mode = %s, want %s", msg.Mode, tc.wantMode)
			}

			if !strings.HasPrefix(msg.ModeDetails, tc.wantPrefix) || !strings.Contains(msg.ModeDetails, tc.wantContain) {
				t.Errorf("details = %q\nwant prefix %q containing %q", msg.ModeDetails, tc.wantPrefix, tc.wantContain)
			}
		})
	}

	if active, persisted := activeAndPersisted(t, c, cp); !active || !persisted {
		t.Errorf("a dry run changed the config (active same: %t, persisted same: %t)", active, persisted)
	}

	if m.Calls("ApplyConfiguration") != 7 || m.Calls("ApplyConfiguration(dry-run)") != 7 {
		t.Errorf("calls = %d, dry runs = %d; want 7 and 7", m.Calls("ApplyConfiguration"), m.Calls("ApplyConfiguration(dry-run)"))
	}
}

func TestApplyModes(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	labels := patch(t, cp, labelPatch)
	env := patch(t, cp, envPatch)

	t.Run("no-reboot", func(t *testing.T) {
		f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
		c := admin(t, f.Machine("cp-1").Addr())

		before := time.Now()

		msg, err := apply(t, c, labels, machine.ApplyConfigurationRequest_NO_REBOOT, false)
		if err != nil {
			t.Fatal(err)
		}

		if booted, err := bootTime(t, c); err != nil || booted.After(before) {
			t.Errorf("node rebooted (booted %v, apply at %v, %v)", booted, before, err)
		}

		if msg.ModeDetails != "Applied configuration without a reboot" {
			t.Errorf("details = %q", msg.ModeDetails)
		}

		if active, persisted := activeAndPersisted(t, c, labels); !active || !persisted {
			t.Errorf("active applied %t, persisted %t; want both", active, persisted)
		}
	})

	t.Run("auto reboots when it must", func(t *testing.T) {
		f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
		c := admin(t, f.Machine("cp-1").Addr())

		msg, err := apply(t, c, env, machine.ApplyConfigurationRequest_AUTO, false)
		if err != nil {
			t.Fatal(err)
		}

		if msg.Mode != machine.ApplyConfigurationRequest_REBOOT || !strings.HasPrefix(msg.ModeDetails, "Applied configuration with a reboot: this config change can't be applied in immediate mode") {
			t.Errorf("mode %s, details %q", msg.Mode, msg.ModeDetails)
		}

		eventually(t, "rebooted into the new config", configIs(t, c, env, true))
	})

	t.Run("staged", func(t *testing.T) {
		f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
		c := admin(t, f.Machine("cp-1").Addr())

		if _, err := apply(t, c, env, machine.ApplyConfigurationRequest_STAGED, false); err != nil {
			t.Fatal(err)
		}

		if active, persisted := activeAndPersisted(t, c, env); active || !persisted {
			t.Errorf("active applied %t, persisted %t; want only persisted", active, persisted)
		}

		// the staged config becomes active on the next reboot
		f.Machine("cp-1").Crash()

		eventually(t, "staged config active after reboot", configIs(t, c, env, true))
	})

	t.Run("try", func(t *testing.T) {
		f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
		c := admin(t, f.Machine("cp-1").Addr())

		resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{
			Data: labels, Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(300 * time.Millisecond),
		})
		if err != nil {
			t.Fatal(err)
		}

		if want := "Applied configuration without a reboot\nThe config is applied in 'try' mode and will be automatically reverted back in 300ms"; resp.Messages[0].ModeDetails != want {
			t.Errorf("details = %q, want %q", resp.Messages[0].ModeDetails, want)
		}

		if active, persisted := activeAndPersisted(t, c, labels); !active || persisted {
			t.Errorf("active applied %t, persisted %t; want only active", active, persisted)
		}

		eventually(t, "try config reverted", configIs(t, c, cp, true))

		if _, err := apply(t, c, env, machine.ApplyConfigurationRequest_TRY, false); client.StatusCode(err) != codes.InvalidArgument {
			t.Errorf("try a reboot change: %v, want InvalidArgument", err)
		}
	})

	t.Run("reboot", func(t *testing.T) {
		f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
		c := admin(t, f.Machine("cp-1").Addr())

		before := time.Now()

		// as talosctl sends it: through apid to the node itself
		resp, err := c.ApplyConfiguration(client.WithNodes(t.Context(), f.Machine("cp-1").Addr()),
			&machine.ApplyConfigurationRequest{Data: labels, Mode: machine.ApplyConfigurationRequest_REBOOT})
		if err != nil {
			t.Fatal(err)
		}

		msg := resp.Messages[0]
		if msg.Mode != machine.ApplyConfigurationRequest_REBOOT || msg.ModeDetails != "Applied configuration with a reboot" || msg.Metadata.GetHostname() != f.Machine("cp-1").Addr() {
			t.Errorf("mode %s, details %q, metadata %v", msg.Mode, msg.ModeDetails, msg.Metadata)
		}

		// the node went away and came back (its services restarted) with the config
		eventually(t, "node back with the config", func() error {
			if booted, err := bootTime(t, c); err != nil || !booted.After(before) {
				return fmt.Errorf("booted %v (before apply %v): %w", booted, before, err)
			}

			return configIs(t, c, labels, true)()
		})
	})
}

// Talos 1.14 applies every change live (v1alpha1_server.go
// ApplyConfiguration in v1.14.1; CanApplyImmediate is gone): a change 1.11
// reboots for (machine.env) is applied without a reboot in AUTO and in
// NO_REBOOT, and REBOOT is refused on a configured machine.
func TestApplyOnTalos114IsAlwaysLive(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	env := patch(t, cp, envPatch)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"})
	c := admin(t, f.Machine("cp-1").Addr())

	msg, err := apply(t, c, env, machine.ApplyConfigurationRequest_AUTO, true)
	if err != nil || msg.Mode != machine.ApplyConfigurationRequest_NO_REBOOT || !strings.Contains(msg.ModeDetails, "Applied configuration without a reboot (skipped in dry-run)") {
		t.Fatalf("AUTO dry run of a machine.env change on 1.14: %+v, %v; want NO_REBOOT", msg, err)
	}

	_, err = apply(t, c, env, machine.ApplyConfigurationRequest_REBOOT, false)
	wantCode(t, "REBOOT on 1.14", err, codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")

	if msg, err = apply(t, c, env, machine.ApplyConfigurationRequest_NO_REBOOT, false); err != nil || msg.Mode != machine.ApplyConfigurationRequest_NO_REBOOT {
		t.Fatalf("NO_REBOOT of a machine.env change on 1.14: %+v, %v", msg, err)
	}

	if active, persisted := activeAndPersisted(t, c, env); !active || !persisted {
		t.Errorf("after a live apply: active %t, persisted %t; want both", active, persisted)
	}

	if f.Machine("cp-1").Observe().Down {
		t.Error("a live apply rebooted the machine")
	}
}
