package sim_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/sim"
)

func TestVersion(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: cp, TalosVersion: "v1.10.6"},
	)

	for _, tc := range []struct {
		machine string
		want    string
	}{
		{"cp-1", "v1.11.0"},
		{"cp-2", "v1.10.6"},
	} {
		t.Run(tc.machine, func(t *testing.T) {
			c := dial(t, role.MakeSet(role.Reader), f.Machine(tc.machine).Addr())

			resp, err := c.Version(t.Context())
			if err != nil {
				t.Fatalf("version: %v", err)
			}

			if len(resp.Messages) != 1 {
				t.Fatalf("got %d messages, want 1", len(resp.Messages))
			}

			tag := resp.Messages[0].Version.Tag
			if tag != tc.want {
				t.Errorf("tag = %q, want %q", tag, tc.want)
			}

			if _, err := semver.ParseTolerant(tag); err != nil {
				t.Errorf("tag %q is not semver: %v", tag, err)
			}

			if resp.Messages[0].Metadata != nil {
				t.Errorf("a direct call has metadata %v", resp.Messages[0].Metadata)
			}

			// by short name, by service and method, by full name
			for _, name := range []string{"Version", "MachineService.Version", "/machine.MachineService/Version"} {
				if got := f.Machine(tc.machine).Calls(name); got != 1 {
					t.Errorf("Calls(%s) = %d, want 1", name, got)
				}
			}
		})
	}

	// each call once
	if got := f.TotalCalls(); got != 2 {
		t.Errorf("TotalCalls = %d, want 2", got)
	}
}

func TestMachineConfigResource(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	c := admin(t, f.Machine("cp-1").Addr())

	want, err := configloader.NewFromBytes(cp)
	if err != nil {
		t.Fatal(err)
	}

	for _, id := range []string{config.ActiveID, config.PersistentID} {
		mc, err := safe.StateGet[*config.MachineConfig](t.Context(), c.COSI, config.NewMachineConfigWithID(nil, id).Metadata())
		if err != nil {
			t.Fatalf("get MachineConfig %s: %v", id, err)
		}

		diff, err := configdiff.DiffConfigs(want, mc.Provider())
		if err != nil {
			t.Fatal(err)
		}

		if diff != "" {
			t.Errorf("MachineConfig %s differs from the applied config:\n%s", id, diff)
		}

		// what `talosctl get mc -o yaml` prints (needs devata's yaml.v3 replace)
		out, err := yaml.Marshal(mc.Spec())
		if err != nil || !strings.Contains(string(out), "machine:") || !strings.Contains(string(out), "cluster:") {
			t.Errorf("MachineConfig %s spec as YAML = %q, %v", id, out, err)
		}
	}

	ms, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		t.Fatalf("get MachineStatus: %v", err)
	}

	// A control plane without etcd stays booting: StartAllServices waits for
	// etcd (internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer_tasks.go),
	// and MachineStatus's readiness checks (controllers/runtime/machine_status.go
	// servicesCheck, nodeReadyCheck) name etcd and the missing Node.
	wantUnmet := []runtime.UnmetCondition{
		{Name: "services", Reason: "etcd not running"},
		{Name: "nodeReady", Reason: `node "cp-1" status is not available yet`},
	}
	if ms.TypedSpec().Stage != runtime.MachineStageBooting || ms.TypedSpec().Status.Ready || !slices.Equal(ms.TypedSpec().Status.UnmetConditions, wantUnmet) {
		t.Errorf("machine status = %+v, want booting, not ready, unmet %v", ms.TypedSpec(), wantUnmet)
	}
}

func TestRoles(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})
	addr := f.Machine("cp-1").Addr()

	for _, tc := range []struct {
		role          role.Role
		configAllowed bool
		applyAllowed  bool
	}{
		{role.Admin, true, true},
		{role.Operator, false, false},
		{role.Reader, false, false},
	} {
		t.Run(string(tc.role), func(t *testing.T) {
			c := dial(t, role.MakeSet(tc.role), addr)

			if _, err := c.Version(t.Context()); err != nil {
				t.Errorf("version: %v", err)
			}

			if _, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata()); err != nil {
				t.Errorf("get MachineStatus: %v", err)
			}

			_, err := safe.StateGet[*config.MachineConfig](t.Context(), c.COSI, config.NewMachineConfigWithID(nil, config.ActiveID).Metadata())
			checkAllowed(t, "get MachineConfig", err, tc.configAllowed)

			_, err = c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_NO_REBOOT, DryRun: true})
			checkAllowed(t, "apply", err, tc.applyAllowed)
		})
	}

	t.Run("writes", func(t *testing.T) {
		c := admin(t, addr)

		// the COSI client turns PermissionDenied on writes into a conflict error
		err := c.COSI.Create(t.Context(), runtime.NewMachineStatus())
		if err == nil || !strings.Contains(err.Error(), "code = PermissionDenied desc = write access is not allowed") {
			t.Errorf("create MachineStatus: %v, want PermissionDenied", err)
		}
	})
}

func checkAllowed(t *testing.T, what string, err error, allowed bool) {
	t.Helper()

	switch {
	case allowed && err != nil:
		t.Errorf("%s: %v, want allowed", what, err)
	case !allowed && client.StatusCode(err) != codes.PermissionDenied:
		t.Errorf("%s: %v, want PermissionDenied", what, err)
	case !allowed && !strings.Contains(err.Error(), "not authorized"):
		t.Errorf("%s: %v, want \"not authorized\"", what, err)
	}
}

func TestStartErrors(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)

	for _, tc := range []struct {
		name string
		opts sim.Options
		want string
	}{
		{"no bundle", sim.Options{Machines: []sim.MachineSpec{{Name: "a"}}}, "secrets bundle"},
		{"no name", sim.Options{Bundle: bundle, Machines: []sim.MachineSpec{{}}}, "name is empty"},
		{"duplicate", sim.Options{Bundle: bundle, Machines: []sim.MachineSpec{{Name: "a"}, {Name: "a"}}}, "not unique"},
		{"role", sim.Options{Bundle: bundle, Machines: []sim.MachineSpec{{Name: "a", Role: "etcd"}}}, "neither controlplane nor worker"},
		{"config", sim.Options{Bundle: bundle, Machines: []sim.MachineSpec{{Name: "a", Config: []byte("kind: Nonsense\n")}}}, "load config"},
		{"address", sim.Options{Bundle: bundle, Machines: []sim.MachineSpec{{Name: "a", Config: cp, Address: "256.0.0.1:0"}}}, "listen"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := sim.Start(t.Context(), tc.opts)
			if err == nil {
				f.Close() //nolint:errcheck

				t.Fatalf("started, want an error about %q", tc.want)
			}

			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}
