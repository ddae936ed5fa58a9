package sim_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"devata.dev/devata/sim"
)

const storageDocs = `
apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: '!system_disk'
  minSize: 100GiB
---
apiVersion: v1alpha1
kind: UserVolumeConfig
name: huge
provisioning:
  diskSelector:
    match: disk.size > 10u * TiB
  minSize: 1GiB
`

const legacyDisks = `machine:
  disks:
    - device: /dev/sdd
      partitions:
        - mountpoint: /var/mnt/legacy
          size: 10GiB
        - mountpoint: /var/mnt/rest
  kubelet:
    extraMounts:
      - {destination: /var/mnt/data, type: bind, source: /var/mnt/data, options: [bind, rshared, rw]}
`

func volumeStatus(t *testing.T, c *client.Client, id string) (*block.VolumeStatusSpec, error) {
	t.Helper()
	vs, err := safe.StateGet[*block.VolumeStatus](t.Context(), c.COSI, block.NewVolumeStatus(block.NamespaceName, id).Metadata())
	if err != nil {
		return nil, err
	}
	return vs.TypedSpec(), nil
}

func signature(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	dv, err := safe.StateGet[*block.DiscoveredVolume](t.Context(), c.COSI, block.NewDiscoveredVolume(block.NamespaceName, id).Metadata())
	if err != nil {
		t.Fatalf("discovered volume %s: %v", id, err)
	}
	return dv.TypedSpec().Name
}

// Volumes land on the first disk their selector matches, as Talos' CEL
// selectors choose; machine.disks partitions follow the config; faults bend
// what the node reports.
func TestStorageFollowsConfigAndDisks(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, patch(t, withDocs(cp, storageDocs), legacyDisks))

	data, err := volumeStatus(t, c, "u-data")
	if err != nil || data.Phase != block.VolumePhaseReady || data.ParentLocation != "/dev/sdb" {
		t.Errorf("u-data = %+v, %v; want ready on /dev/sdb", data, err)
	}
	huge, err := volumeStatus(t, c, "u-huge")
	if err != nil || huge.Phase != block.VolumePhaseFailed || huge.PreFailPhase != block.VolumePhaseWaiting || huge.ErrorMessage != "no disks matched selector for volume" {
		t.Errorf("u-huge = %+v, %v; want failed while waiting: no disks matched", huge, err)
	}
	legacy, err := volumeStatus(t, c, "/dev/sdd-1")
	if err != nil || legacy.Phase != block.VolumePhaseReady || legacy.Size != 10<<30 || legacy.MountSpec.TargetPath != "mnt/legacy" || legacy.MountSpec.ParentID != "EPHEMERAL" {
		t.Errorf("/dev/sdd-1 = %+v, %v", legacy, err)
	}
	ms, err := safe.StateGet[*block.MountStatus](t.Context(), c.COSI, block.NewMountStatus(block.NamespaceName, "/dev/sdd-2").Metadata())
	if err != nil || ms.TypedSpec().Target != "/var/mnt/rest" || ms.TypedSpec().Source != "/dev/sdd2" || ms.TypedSpec().Filesystem != block.FilesystemTypeXFS {
		t.Errorf("mount status /dev/sdd-2 = %v, %v", ms, err)
	}
	sd, err := safe.StateGet[*block.SystemDisk](t.Context(), c.COSI, block.NewSystemDisk(block.NamespaceName, block.SystemDiskID).Metadata())
	if err != nil || sd.TypedSpec().DiskID != "sda" {
		t.Errorf("system disk = %v, %v", sd, err)
	}
	if got := [3]string{signature(t, c, "sda"), signature(t, c, "sdb"), signature(t, c, "sdc")}; got != [3]string{"gpt", "gpt", ""} {
		t.Errorf("disk signatures sda, sdb, sdc = %q; want gpt, gpt and blank", got)
	}

	m.SetFaults(sim.Faults{
		DisksMissing:        []string{"/dev/sdb"},
		DiskSignatures:      map[string]string{"/dev/sdc": "xfs"},
		PartitionMissing:    []string{"/var/mnt/legacy"},
		MountMissing:        []string{"/var/mnt/rest"},
		KubeletMountOptions: map[string][]string{"/var/mnt/data": {"bind", "rw"}},
	})
	// without sdb, !system_disk still matches the spare disk
	if data, err := volumeStatus(t, c, "u-data"); err != nil || data.ParentLocation != "/dev/sdc" {
		t.Errorf("u-data without sdb = %+v, %v; want on /dev/sdc", data, err)
	}
	if sig := signature(t, c, "sdc"); sig != "xfs" {
		t.Errorf("sdc signature %q, want the injected xfs", sig)
	}
	if _, err := volumeStatus(t, c, "/dev/sdd-1"); !state.IsNotFoundError(err) {
		t.Errorf("missing partition: %v, want not found", err)
	}
	if _, err := safe.StateGet[*block.MountStatus](t.Context(), c.COSI, block.NewMountStatus(block.NamespaceName, "/dev/sdd-2").Metadata()); !state.IsNotFoundError(err) {
		t.Errorf("unmounted partition's mount status: %v, want not found", err)
	}
	if mounted(t, c, "/var/mnt/rest") {
		t.Error("Mounts lists an unmounted partition")
	}
	ks, err := safe.StateGet[*k8s.KubeletSpec](t.Context(), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil || len(ks.TypedSpec().ExtraMounts) != 1 || slices.Contains(ks.TypedSpec().ExtraMounts[0].Options, "rshared") {
		t.Errorf("kubelet extra mounts = %v, %v; want one without rshared", ks, err)
	}

	m.SetFaults(sim.Faults{DisksMissing: []string{"/dev/sdb", "/dev/sdc", "/dev/sdd"}, KubeletMountMissing: []string{"/var/mnt/data"}})
	if data, err := volumeStatus(t, c, "u-data"); err != nil || data.Phase != block.VolumePhaseFailed || data.ErrorMessage != "no disks matched selector for volume" {
		t.Errorf("u-data without data disks = %+v, %v", data, err)
	}
	ks, err = safe.StateGet[*k8s.KubeletSpec](t.Context(), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil || len(ks.TypedSpec().ExtraMounts) != 0 {
		t.Errorf("kubelet extra mounts = %v, %v; want none", ks, err)
	}
}

func TestFaultsFileStorage(t *testing.T) {
	t.Parallel()

	path := filepath.Join(t.TempDir(), "faults.yaml")
	if err := os.WriteFile(path, []byte(`
worker-1:
  volumeFilesystem: {longhorn: ext4}
  volumeSize: {longhorn: 50GiB}
  disksMissing: [/dev/sdb]
  diskSignatures: {/dev/sdc: xfs}
  mountMissing: [longhorn]
  partitionMissing: [/var/mnt/legacy]
  kubeletMountMissing: [/var/mnt/longhorn]
  kubeletMountOptions: {/var/mnt/other: [bind, rw]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := sim.LoadFaultsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	f := all["worker-1"]
	if f.VolumeFilesystem["longhorn"] != "ext4" || f.VolumeSize["longhorn"] != 50<<30 || f.DisksMissing[0] != "/dev/sdb" ||
		f.DiskSignatures["/dev/sdc"] != "xfs" || f.MountMissing[0] != "longhorn" || f.PartitionMissing[0] != "/var/mnt/legacy" ||
		f.KubeletMountMissing[0] != "/var/mnt/longhorn" || len(f.KubeletMountOptions["/var/mnt/other"]) != 2 {
		t.Errorf("faults = %+v", f)
	}

	if err := os.WriteFile(path, []byte("worker-1: {volumeSize: {longhorn: lots}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.LoadFaultsFile(path); err == nil {
		t.Error("a volume size without a number was accepted")
	}
}
