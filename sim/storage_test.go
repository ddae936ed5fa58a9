package sim_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"devata.dev/devata/sim"
)

// Every test here reads the node through machinery's client and names the
// Talos v1.11.0 source whose behaviour it shows (paths under
// internal/app/machined/pkg/controllers/block unless said otherwise).

const (
	gib = int64(1) << 30
	mib = int64(1) << 20
	// what go-blockdevice's GPT leaves of a blank disk: 1 MiB before the
	// first aligned partition, 1 MiB at the end for the backup table
	gptLoss = 2 * mib
)

const storageDocs = `
apiVersion: v1alpha1
kind: UserVolumeConfig
name: data
provisioning:
  diskSelector:
    match: '!system_disk'
  minSize: 100GiB
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

func userVolume(name, selector string, extra ...string) string {
	return fmt.Sprintf("apiVersion: v1alpha1\nkind: UserVolumeConfig\nname: %s\nprovisioning:\n  diskSelector:\n    match: '%s'\n%s\n",
		name, selector, "  "+strings.Join(extra, "\n  "))
}

func volumeStatus(t *testing.T, c *client.Client, id string) (*block.VolumeStatusSpec, error) {
	t.Helper()
	vs, err := safe.StateGet[*block.VolumeStatus](t.Context(), c.COSI, block.NewVolumeStatus(block.NamespaceName, id).Metadata())
	if err != nil {
		return nil, err
	}
	return vs.TypedSpec(), nil
}

func mustVolume(t *testing.T, c *client.Client, id string) *block.VolumeStatusSpec {
	t.Helper()
	vs, err := volumeStatus(t, c, id)
	if err != nil {
		t.Fatalf("volume status %s: %v", id, err)
	}
	return vs
}

func discovered(t *testing.T, c *client.Client, id string) *block.DiscoveredVolumeSpec {
	t.Helper()
	dv, err := safe.StateGet[*block.DiscoveredVolume](t.Context(), c.COSI, block.NewDiscoveredVolume(block.NamespaceName, id).Metadata())
	if err != nil {
		t.Fatalf("discovered volume %s: %v", id, err)
	}
	return dv.TypedSpec()
}

func signature(t *testing.T, c *client.Client, id string) string {
	t.Helper()
	return discovered(t, c, id).Name
}

func mountStat(t *testing.T, c *client.Client, target string) *machine.MountStat {
	t.Helper()
	resp, err := c.Mounts(t.Context())
	if err != nil {
		t.Fatalf("mounts: %v", err)
	}
	for _, s := range resp.Messages[0].Stats {
		if s.MountedOn == target {
			return s
		}
	}
	return nil
}

// wantReady, wantFailed and wantWaiting check one VolumeStatus.
func wantReady(t *testing.T, c *client.Client, id, location string, size int64) {
	t.Helper()
	vs := mustVolume(t, c, id)
	if vs.Phase != block.VolumePhaseReady || vs.Location != location || size != 0 && vs.Size != uint64(size) {
		t.Errorf("%s: %s on %q, %d bytes; want ready on %s, %d bytes", id, vs.Phase, vs.Location, vs.Size, location, size)
	}
}

func wantFailed(t *testing.T, c *client.Client, id string, preFail block.VolumePhase, msg string) {
	t.Helper()
	vs := mustVolume(t, c, id)
	if vs.Phase != block.VolumePhaseFailed || vs.PreFailPhase != preFail || vs.ErrorMessage != msg {
		t.Errorf("%s: %s (was %s) %q; want failed (was %s) %q", id, vs.Phase, vs.PreFailPhase, vs.ErrorMessage, preFail, msg)
	}
}

func wantWaiting(t *testing.T, c *client.Client, id string) {
	t.Helper()
	vs := mustVolume(t, c, id)
	if vs.Phase != block.VolumePhaseWaiting || vs.ErrorMessage != "" || vs.Location != "" {
		t.Errorf("%s: %s %q on %q; want waiting, no message, not located", id, vs.Phase, vs.ErrorMessage, vs.Location)
	}
}

// The order, sizes and disks of user volumes follow Talos' volume manager:
// volume_manager.go Run sorts the volume configs with
// internal/volumes/volumes.go CompareVolumeConfigs (no grow first, then the
// smaller maxSize, none counting as the largest, then by ID);
// internal/volumes/locate.go LocateAndProvision tries each matching disk in
// turn with disk.go CheckDiskForProvisioning; partition.go CreatePartition
// gives a volume without maxSize all the free space of its disk. Once a
// volume is not ready, the ones after it that still have to be created wait
// (volume_manager.go fullyProvisionedWave).
func TestUserVolumesTakeDisksInTurn(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, withDocs(cp,
		userVolume("a", "!system_disk", "minSize: 100GiB"),
		userVolume("b", "!system_disk", "minSize: 100GiB"),
		userVolume("c", "!system_disk", "minSize: 100GiB", "grow: true"),
		userVolume("d", "!system_disk", "minSize: 1GiB", "grow: true"),
		userVolume("small", "!system_disk", "minSize: 1GiB", "maxSize: 10GiB"),
	))

	// small first (it has a maxSize), then a and b (by ID), then the growing c and d
	wantReady(t, c, "u-small", "/dev/sdb1", 10*gib)
	wantReady(t, c, "u-a", "/dev/sdb2", 2<<40-gptLoss-10*gib)
	wantReady(t, c, "u-b", "/dev/sdc1", 1<<40-gptLoss)
	wantFailed(t, c, "u-c", block.VolumePhaseWaiting, "no disks matched for volume (2 matched selector): 2 have not enough space, 0 have wrong format, 0 have other issues")
	wantWaiting(t, c, "u-d")
	if !mounted(t, c, "/var/mnt/b") || mounted(t, c, "/var/mnt/c") || mounted(t, c, "/var/mnt/d") {
		t.Error("Mounts: want /var/mnt/b mounted, /var/mnt/c and /var/mnt/d not")
	}
	if dv := discovered(t, c, "sdb2"); dv.PartitionLabel != "u-a" || dv.Name != "xfs" || dv.PartitionIndex != 2 {
		t.Errorf("sdb2 = %+v; want u-a's xfs partition 2", dv)
	}

	// disk.go: a disk with another signature than GPT is the wrong format
	m.SetFaults(sim.Faults{DiskSignatures: map[string]string{"/dev/sdc": "bluestore"}})
	wantFailed(t, c, "u-b", block.VolumePhaseWaiting, "no disks matched for volume (2 matched selector): 1 have not enough space, 1 have wrong format, 0 have other issues")
	wantWaiting(t, c, "u-c") // behind u-b now
	wantWaiting(t, c, "u-d")
	if sig := signature(t, c, "sdc"); sig != "bluestore" {
		t.Errorf("sdc signature %q, want bluestore", sig)
	}

	// go-blockdevice v2 blkid has no prober for MBR tables: a "dos" disk is blank to Talos
	m.SetFaults(sim.Faults{DiskSignatures: map[string]string{"/dev/sdc": "dos"}})
	wantReady(t, c, "u-b", "/dev/sdc1", 1<<40-gptLoss)
	if sig := signature(t, c, "sdc"); sig != "gpt" {
		t.Errorf("sdc signature %q, want gpt: Talos partitioned what it saw as blank", sig)
	}

	// without sdb every volume moves on to the next disk that matches
	m.SetFaults(sim.Faults{DisksMissing: []string{"/dev/sdb"}})
	wantReady(t, c, "u-small", "/dev/sdc1", 10*gib)
	wantReady(t, c, "u-a", "/dev/sdc2", 1<<40-gptLoss-10*gib)
	wantFailed(t, c, "u-b", block.VolumePhaseWaiting, "no disks matched for volume (1 matched selector): 1 have not enough space, 0 have wrong format, 0 have other issues")
	wantWaiting(t, c, "u-c")
}

// A selector that matches no disk fails the volume while waiting
// (internal/volumes/locate.go), and holds back every later wave, the
// machine.disks partitions included (volume_manager.go fullyProvisionedWave,
// user_disk_config.go waves 1000000+).
func TestVolumeMatchingNoDiskHoldsBackLaterWaves(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, patch(t, withDocs(cp, userVolume("huge", "disk.size > 10u * TiB", "minSize: 1GiB")), legacyDisks))

	wantFailed(t, c, "u-huge", block.VolumePhaseWaiting, "no disks matched selector for volume")
	wantWaiting(t, c, "/dev/sdd-1")
	wantWaiting(t, c, "/dev/sdd-2")

	m.SetFaults(sim.Faults{VolumeMissing: []string{"huge"}}) // as if the document were gone
	wantReady(t, c, "/dev/sdd-1", "/dev/sdd1", 10*gib)
	wantReady(t, c, "/dev/sdd-2", "/dev/sdd2", 512*gib-gptLoss-10*gib)
}

// machine.disks partitions (user_disk_config.go) and the node's disks:
// volumes land on the disks their selectors match, evaluated with Talos'
// CEL disk environment; the system disk carries the installer's UKI layout
// (EFI, META, STATE) and EPHEMERAL (volume_config.go); faults bend what the
// node reports.
func TestStorageFollowsConfigAndDisks(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, patch(t, withDocs(cp, storageDocs), legacyDisks))

	wantReady(t, c, "u-data", "/dev/sdb1", 2<<40-gptLoss)
	legacy, err := volumeStatus(t, c, "/dev/sdd-1")
	if err != nil || legacy.Phase != block.VolumePhaseReady || legacy.Size != 10<<30 || legacy.MountSpec.TargetPath != "mnt/legacy" || legacy.MountSpec.ParentID != "EPHEMERAL" {
		t.Errorf("/dev/sdd-1 = %+v, %v", legacy, err)
	}
	ms, err := safe.StateGet[*block.MountStatus](t.Context(), c.COSI, block.NewMountStatus(block.NamespaceName, "/dev/sdd-2").Metadata())
	if err != nil || ms.TypedSpec().Target != "/var/mnt/rest" || ms.TypedSpec().Source != "/dev/sdd2" || ms.TypedSpec().Filesystem != block.FilesystemTypeXFS {
		t.Errorf("mount status /dev/sdd-2 = %v, %v", ms, err)
	}
	if dv := discovered(t, c, "sdd1"); dv.PartitionLabel != "" {
		t.Errorf("sdd1 label %q: machine.disks partitions have none", dv.PartitionLabel)
	}
	sd, err := safe.StateGet[*block.SystemDisk](t.Context(), c.COSI, block.NewSystemDisk(block.NamespaceName, block.SystemDiskID).Metadata())
	if err != nil || sd.TypedSpec().DiskID != "sda" {
		t.Errorf("system disk = %v, %v", sd, err)
	}
	if got := [3]string{signature(t, c, "sda"), signature(t, c, "sdb"), signature(t, c, "sdc")}; got != [3]string{"gpt", "gpt", ""} {
		t.Errorf("disk signatures sda, sdb, sdc = %q; want gpt, gpt and blank", got)
	}
	for id, want := range map[string][2]string{"sda1": {"EFI", "vfat"}, "sda2": {"META", "talosmeta"}, "sda3": {"STATE", "xfs"}, "sda4": {"EPHEMERAL", "xfs"}} {
		if dv := discovered(t, c, id); dv.PartitionLabel != want[0] || dv.Name != want[1] {
			t.Errorf("%s = %s %s, want %s %s", id, dv.PartitionLabel, dv.Name, want[0], want[1])
		}
	}
	wantReady(t, c, "EPHEMERAL", "/dev/sda4", 256*gib-2204*mib) // 1 MiB, EFI 2101 MiB, META 1 MiB, STATE 100 MiB, 1 MiB at the end

	m.SetFaults(sim.Faults{
		DisksMissing:        []string{"/dev/sdb"},
		PartitionMissing:    []string{"/var/mnt/legacy"},
		MountMissing:        []string{"/var/mnt/rest"},
		KubeletMountOptions: map[string][]string{"/var/mnt/data": {"bind", "rw"}},
	})
	// without sdb, !system_disk still matches the spare disk
	wantReady(t, c, "u-data", "/dev/sdc1", 1<<40-gptLoss)
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

	// the spare disk carries an old filesystem: u-data takes the machine.disks
	// disk whole, and the machine.disks partitions find no room there
	// (the second has no size, so partition.go CreatePartition asks
	// go-blockdevice's gpt for an empty partition), except the first, which
	// locates u-data's partition by its index (user_disk_config.go
	// partitionIdxMatch)
	m.SetFaults(sim.Faults{DisksMissing: []string{"/dev/sdb"}, DiskSignatures: map[string]string{"/dev/sdc": "xfs"}})
	wantReady(t, c, "u-data", "/dev/sdd1", 512*gib-gptLoss)
	wantReady(t, c, "/dev/sdd-1", "/dev/sdd1", 512*gib-gptLoss)
	wantFailed(t, c, "/dev/sdd-2", block.VolumePhaseWaiting, "error creating partition: error allocating partition: partition size must be greater than sector size")
	if sig := signature(t, c, "sdc"); sig != "xfs" {
		t.Errorf("sdc signature %q, want the injected xfs", sig)
	}

	m.SetFaults(sim.Faults{DisksMissing: []string{"/dev/sdb", "/dev/sdc", "/dev/sdd"}, KubeletMountMissing: []string{"/var/mnt/data"}})
	wantFailed(t, c, "u-data", block.VolumePhaseWaiting, "no disks matched selector for volume")
	ks, err = safe.StateGet[*k8s.KubeletSpec](t.Context(), c.COSI, k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID).Metadata())
	if err != nil || len(ks.TypedSpec().ExtraMounts) != 0 {
		t.Errorf("kubelet extra mounts = %v, %v; want none", ks, err)
	}
}

// EPHEMERAL takes the rest of the system disk unless a VolumeConfig
// document bounds it (volume_config.go); only then does a user volume fit
// there.
func TestEphemeralMaxSizeLeavesRoomOnTheSystemDisk(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	onSystem := userVolume("local", "system_disk", "minSize: 10GiB")
	_, c := oneMachine(t, withDocs(cp, onSystem))
	wantFailed(t, c, "u-local", block.VolumePhaseWaiting, "no disks matched for volume (1 matched selector): 1 have not enough space, 0 have wrong format, 0 have other issues")

	_, c = oneMachine(t, withDocs(cp, "apiVersion: v1alpha1\nkind: VolumeConfig\nname: EPHEMERAL\nprovisioning:\n  maxSize: 100GiB\n", onSystem))
	wantReady(t, c, "EPHEMERAL", "/dev/sda4", 100*gib)
	wantReady(t, c, "u-local", "/dev/sda5", 256*gib-2204*mib-100*gib)
}

// A partition that already carries another filesystem fails its volume
// while prepared: internal/volumes/format.go Format ("filesystem type
// mismatch"). A blank partition, swap, or a signature go-blockdevice's blkid
// does not probe (btrfs) is formatted instead.
func TestWrongFilesystemFailsTheVolume(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	m, c := oneMachine(t, withDocs(cp, storageDocs))

	m.SetFaults(sim.Faults{VolumeFilesystem: map[string]string{"data": "ext4"}})
	wantFailed(t, c, "u-data", block.VolumePhasePrepared, "filesystem type mismatch: ext4 != xfs")
	vs := mustVolume(t, c, "u-data")
	if vs.Location != "/dev/sdb1" || vs.MountLocation != "/dev/sdb1" || vs.Filesystem != block.FilesystemTypeNone {
		t.Errorf("u-data = %+v; want located on /dev/sdb1, no filesystem", vs)
	}
	if sig := signature(t, c, "sdb1"); sig != "ext4" {
		t.Errorf("sdb1 signature %q, want what is on it: ext4", sig)
	}
	if _, err := safe.StateGet[*block.MountStatus](t.Context(), c.COSI, block.NewMountStatus(block.NamespaceName, "u-data").Metadata()); !state.IsNotFoundError(err) {
		t.Errorf("mount status of a failed volume: %v, want not found", err)
	}
	if mounted(t, c, "/var/mnt/data") {
		t.Error("Mounts lists a failed volume")
	}

	for _, found := range []string{"xfs", "swap", "btrfs", ""} {
		m.SetFaults(sim.Faults{VolumeFilesystem: map[string]string{"data": found}})
		vs := mustVolume(t, c, "u-data")
		if vs.Phase != block.VolumePhaseReady || vs.Filesystem != block.FilesystemTypeXFS || signature(t, c, "sdb1") != "xfs" {
			t.Errorf("%q on the partition: %s %s; want ready xfs", found, vs.Phase, vs.Filesystem)
		}
	}
}

// The Mounts API reports what statfs says of each mounted filesystem
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// Server.Mounts), less than the partition: XFS keeps its internal log out of
// it, ext4 its inode tables and journal, and reserves 5% for root.
func TestMountsReportFilesystemSize(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	_, c := oneMachine(t, withDocs(cp, storageDocs, userVolume("logs", "!system_disk", "minSize: 1GiB", "maxSize: 100GiB")+"filesystem:\n  type: ext4\n"))

	for _, tc := range []struct {
		id, target       string
		minLoss, maxLoss int64 // size lost to the filesystem
		minFree, maxFree int64 // share of the size available on a fresh filesystem, percent
	}{
		{"u-data", "/var/mnt/data", 64 * mib, 2 * gib, 98, 100},
		{"u-logs", "/var/mnt/logs", 100 * gib / 64, 100*gib/64 + gib, 93, 96},
		{"EPHEMERAL", "/var", 64 * mib, 2 * gib, 98, 100},
	} {
		vs := mustVolume(t, c, tc.id)
		st := mountStat(t, c, tc.target)
		if st == nil {
			t.Errorf("Mounts lacks %s", tc.target)
			continue
		}
		loss := int64(vs.Size) - int64(st.Size)
		free := int64(st.Available) * 100 / int64(st.Size)
		if st.Filesystem != vs.Location || loss < tc.minLoss || loss > tc.maxLoss || free < tc.minFree || free >= tc.maxFree {
			t.Errorf("%s: %s, %d of a %d-byte partition, %d available (%d%%); want %s, %d to %d bytes less, %d–%d%% available",
				tc.target, st.Filesystem, st.Size, vs.Size, st.Available, free, vs.Location, tc.minLoss, tc.maxLoss, tc.minFree, tc.maxFree)
		}
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
