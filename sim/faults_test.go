package sim_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

const volumeDocs = `
apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: '!system_disk'
  minSize: 100GiB
filesystem:
  type: xfs
---
apiVersion: v1alpha1
kind: UserVolumeConfig
name: logs
provisioning:
  diskSelector:
    match: '!system_disk'
  minSize: 1GiB
  maxSize: 10GiB
`

func oneMachine(t *testing.T, cfg []byte) (*sim.Machine, *client.Client) {
	t.Helper()

	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cfg})
	m := f.Machine("cp-1")

	return m, admin(t, m.Addr())
}

func TestFaultUnreachable(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, cp)

	m.SetFaults(sim.Faults{Unreachable: true})

	if _, err := c.Version(ctxTimeout(t, 2*time.Second)); client.StatusCode(err) != codes.Unavailable {
		t.Errorf("version while unreachable: %v, want Unavailable", err)
	}

	m.SetFaults(sim.Faults{})

	eventually(t, "reachable again", func() error {
		_, err := c.Version(ctxTimeout(t, time.Second))

		return err
	})
}

func TestFaultLatencyAndErrors(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, cp)

	m.SetFaults(sim.Faults{Latency: 5 * time.Second})

	if _, err := c.Version(ctxTimeout(t, 300*time.Millisecond)); client.StatusCode(err) != codes.DeadlineExceeded {
		t.Errorf("version with latency: %v, want DeadlineExceeded", err)
	}

	m.SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"Version": codes.Internal, "Get": codes.ResourceExhausted}})

	if _, err := c.Version(t.Context()); client.StatusCode(err) != codes.Internal {
		t.Errorf("version: %v, want Internal", err)
	}

	_, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
	if client.StatusCode(err) != codes.ResourceExhausted {
		t.Errorf("get: %v, want ResourceExhausted", err)
	}

	if _, err := c.ServiceList(t.Context()); err != nil {
		t.Errorf("service list is not faulted: %v", err)
	}

	m.SetFaults(sim.Faults{TalosVersion: "v1.9.5"})

	if resp, err := c.Version(t.Context()); err != nil || resp.Messages[0].Version.Tag != "v1.9.5" {
		t.Errorf("version = %v, %v; want v1.9.5", resp, err)
	}
}

func TestFaultDriftedConfig(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	drifted := patch(t, cp, labelPatch)
	m, c := oneMachine(t, cp)

	m.SetFaults(sim.Faults{DriftedConfig: drifted})

	if active, persisted := activeAndPersisted(t, c, drifted); !active || !persisted {
		t.Errorf("drifted config active %t, persisted %t; want both", active, persisted)
	}

	msg, err := apply(t, c, cp, machine.ApplyConfigurationRequest_AUTO, true)
	if err != nil {
		t.Fatal(err)
	}

	if !strings.Contains(msg.ModeDetails, "-        topology.kubernetes.io/zone: rack-a") {
		t.Errorf("dry run does not show the drift:\n%s", msg.ModeDetails)
	}

	// an apply repairs the drift, and the fault does not strike again
	if _, err := apply(t, c, cp, machine.ApplyConfigurationRequest_NO_REBOOT, false); err != nil {
		t.Fatal(err)
	}

	m.SetFaults(m.Faults())

	if active, persisted := activeAndPersisted(t, c, cp); !active || !persisted {
		t.Errorf("after repair: active %t, persisted %t; want both", active, persisted)
	}
}

func TestFaultKubeletUnhealthy(t *testing.T) {
	t.Parallel()

	_, worker := baseConfigs(t)
	m, c := oneMachine(t, worker)

	m.SetFaults(sim.Faults{KubeletUnhealthy: true})

	svcs, err := c.ServiceInfo(t.Context(), "kubelet")
	if err != nil || len(svcs) != 1 || svcs[0].Service.Health.Healthy || svcs[0].Service.State != "Running" {
		t.Errorf("kubelet service = %v, %v; want running and unhealthy", svcs, err)
	}

	svc, err := safe.StateGet[*v1alpha1.Service](t.Context(), c.COSI, v1alpha1.NewService("kubelet").Metadata())
	if err != nil || svc.TypedSpec().Healthy || !svc.TypedSpec().Running {
		t.Errorf("kubelet Service resource = %v, %v; want running and unhealthy", svc, err)
	}

	ms, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		t.Fatal(err)
	}

	// machine_status.go servicesCheck; no API server runs here, so the
	// Node's status is not available either (nodeReadyCheck)
	unmet := ms.TypedSpec().Status.UnmetConditions
	if ms.TypedSpec().Status.Ready || len(unmet) != 2 || unmet[0].Name != "services" || unmet[0].Reason != "kubelet not healthy" || unmet[1].Name != "nodeReady" {
		t.Errorf("machine status = %+v, want not ready on kubelet and the Node", ms.TypedSpec().Status)
	}

	m.SetFaults(sim.Faults{})

	ms, err = safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil || len(ms.TypedSpec().Status.UnmetConditions) != 1 || ms.TypedSpec().Status.UnmetConditions[0].Name != "nodeReady" {
		t.Errorf("machine status after healing = %v, %v; want only the Node unmet", ms, err)
	}
}

func TestVolumes(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, withDocs(cp, volumeDocs))

	volume := func(id string) (*block.VolumeStatus, error) {
		return safe.StateGet[*block.VolumeStatus](t.Context(), c.COSI, block.NewVolumeStatus(block.NamespaceName, id).Metadata())
	}

	data, err := volume("u-data")
	if err != nil {
		t.Fatalf("volume u-data: %v", err)
	}

	if s := data.TypedSpec(); s.Phase != block.VolumePhaseReady || s.Filesystem != block.FilesystemTypeXFS || s.Size < 100<<30 || s.MountSpec.TargetPath != "/var/mnt/data" {
		t.Errorf("u-data = %+v, want ready xfs ≥ 100GiB at /var/mnt/data", s)
	}

	if logs, err := volume("u-logs"); err != nil || logs.TypedSpec().Size != 10<<30 {
		t.Errorf("u-logs = %v, %v; want 10GiB", logs, err)
	}

	mount, err := safe.StateGet[*runtime.MountStatus](t.Context(), c.COSI, runtime.NewMountStatus(runtime.NamespaceName, "u-data").Metadata())
	if err != nil || mount.TypedSpec().Target != "/var/mnt/data" || mount.TypedSpec().FilesystemType != "xfs" {
		t.Errorf("mount status u-data = %v, %v", mount, err)
	}

	if !mounted(t, c, "/var/mnt/data") {
		t.Error("Mounts does not list /var/mnt/data")
	}

	m.SetFaults(sim.Faults{VolumeFailed: map[string]string{"data": "no disks matched selector"}, VolumeMissing: []string{"logs"}})

	data, err = volume("u-data")
	if err != nil || data.TypedSpec().Phase != block.VolumePhaseFailed || data.TypedSpec().ErrorMessage != "no disks matched selector" {
		t.Errorf("failed u-data = %v, %v", data, err)
	}

	if _, err := volume("u-logs"); !state.IsNotFoundError(err) {
		t.Errorf("missing u-logs: %v, want not found", err)
	}

	if _, err := safe.StateGet[*runtime.MountStatus](t.Context(), c.COSI, runtime.NewMountStatus(runtime.NamespaceName, "u-data").Metadata()); !state.IsNotFoundError(err) {
		t.Errorf("mount of failed volume: %v, want not found", err)
	}

	if mounted(t, c, "/var/mnt/data") {
		t.Error("Mounts lists a failed volume")
	}
}

func mounted(t *testing.T, c *client.Client, target string) bool {
	t.Helper()

	resp, err := c.Mounts(t.Context())
	if err != nil {
		t.Fatalf("mounts: %v", err)
	}

	for _, s := range resp.Messages[0].Stats {
		if s.MountedOn == target {
			if !strings.HasPrefix(s.Filesystem, "/dev/") {
				t.Errorf("mount %s has source %q, want a device", target, s.Filesystem)
			}

			return true
		}
	}

	return false
}

func TestFaultRebootDuringApply(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	labels := patch(t, cp, labelPatch)
	m, c := oneMachine(t, cp)

	m.SetFaults(sim.Faults{RebootDuringApply: true})

	if _, err := apply(t, c, labels, machine.ApplyConfigurationRequest_NO_REBOOT, false); client.StatusCode(err) != codes.Unavailable {
		t.Errorf("apply: %v, want Unavailable", err)
	}

	if m.Faults().RebootDuringApply {
		t.Error("the fault did not clear itself")
	}

	eventually(t, "back with the persisted config", configIs(t, c, labels, true))
}

func TestCrash(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	labels := patch(t, cp, labelPatch)
	m, c := oneMachine(t, cp)

	if _, err := apply(t, c, labels, machine.ApplyConfigurationRequest_TRY, false); err != nil {
		t.Fatal(err)
	}

	before := time.Now()

	m.Crash()

	eventually(t, "rebooted without the tried config", func() error {
		booted, err := bootTime(t, c)
		if err != nil {
			return err
		}

		if !booted.After(before) {
			return fmt.Errorf("booted at %v, before the crash", booted)
		}

		return configIs(t, c, cp, true)()
	})
}

func TestResourceDefinitions(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	_, c := oneMachine(t, cp)

	for _, kind := range []string{"mc", "machineconfig", "machinestatus", "services", "volumestatuses", "disks", "discoveredvolumes", "mounts", "nodeaddresses", "kubeletspecs", "manifeststatuses", "kubeprismstatuses"} {
		var ns resource.Namespace

		if _, err := c.ResolveResourceKind(t.Context(), &ns, kind); err != nil || ns == "" {
			t.Errorf("resolve %q: namespace %q, %v", kind, ns, err)
		}
	}
}
