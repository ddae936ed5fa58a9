package sim

import (
	"bytes"
	"maps"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
)

// Faults are injected into one machine. The zero value is a healthy machine.
type Faults struct {
	// Unreachable drops the machine's connections and closes each new one as
	// soon as it is accepted (the port stays the machine's), so calls fail
	// with Unavailable; apid routing to it fails the same way.
	Unreachable bool
	// Latency delays every call the machine serves, and the etcd health
	// check another control plane's Upgrade makes against it.
	Latency time.Duration
	// ErrorCodes fails calls with the given code, by short method name
	// ("Version", "Get", …) or, where a short name is ambiguous ("List" is
	// both COSI's and MachineService's, "Upgrade" MachineService's and
	// LifecycleService's), by service and method ("State.List",
	// "LifecycleService.Upgrade") or by full name
	// ("/cosi.resource.State/List").
	ErrorCodes map[string]codes.Code
	// DriftedConfig replaces the machine's config behind devata's back when it
	// is set (or changed), as an out-of-band `talosctl apply-config
	// --mode=no-reboot` would: active and persisted alike. A later apply
	// undoes the drift like any other config change. A machine in maintenance
	// mode has no config to drift and ignores it.
	DriftedConfig []byte
	// TalosVersion overrides the version the machine reports, whatever it
	// runs (an upgrade does not clear it).
	TalosVersion string
	// KubeletUnhealthy marks the kubelet service unhealthy and the machine
	// status not ready.
	KubeletUnhealthy bool
	// VolumeFailed fails user volumes by name with an error message, in
	// phase provisioned, as a partition that existed before this boot and
	// then failed would.
	VolumeFailed map[string]string
	// VolumeMissing drops user volumes by name, as if never configured.
	VolumeMissing []string
	// VolumeFilesystem is what blkid finds on user volumes' existing
	// partitions, by name ("ext4", …), as a disk formatted earlier by
	// someone else would hold. Talos' Format keeps the same filesystem,
	// formats a blank one, and fails any other with "filesystem type
	// mismatch: <found> != <wanted>" (sim/storage.go, storageOf).
	VolumeFilesystem map[string]string
	// VolumeSize gives user volumes' existing partitions another size in
	// bytes, by name.
	VolumeSize map[string]uint64
	// DisksMissing takes disks away by device path ("/dev/sdb"), as if pulled
	// or dead: a user volume whose selector then matches no disk fails while
	// waiting, with Talos' "no disks matched selector for volume".
	DisksMissing []string
	// DiskSignatures leaves a signature ("xfs", "bluestore", …) on disks by
	// device path, as an earlier use would: the disk stops being blank, and
	// a volume that must be carved from it fails to find a disk, as
	// CheckDiskForProvisioning refuses any signature but gpt.
	DiskSignatures map[string]string
	// MountMissing leaves volumes ready but unmounted: user volumes by name,
	// machine.disks partitions by mount point.
	MountMissing []string
	// PartitionMissing drops machine.disks partitions by mount point, as if
	// never provisioned.
	PartitionMissing []string
	// KubeletMountMissing drops kubelet extraMounts by destination from the
	// KubeletSpec, as a kubelet started before the config had them would.
	KubeletMountMissing []string
	// KubeletMountOptions replaces the options of kubelet extraMounts by
	// destination, e.g. {"/var/mnt/longhorn": {"bind", "rw"}} (not rshared).
	KubeletMountOptions map[string][]string
	// RebootDuringApply makes the next non-dry-run ApplyConfiguration persist
	// the config, then drop the connection and reboot before replying. It
	// clears itself once it fired.
	RebootDuringApply bool
	// UpgradeImagesMissing names installer images the machine's registry
	// does not have, as written ("ghcr.io/siderolabs/installer:v1.11.1"),
	// as the same reference, or by repository
	// ("ghcr.io/siderolabs/installer"): Upgrade, ImageService.Pull and the
	// first install from maintenance mode fail pulling them, not found, as
	// machined's image.Pull does.
	UpgradeImagesMissing []string
	// InstallerPullDelay, when positive, replaces Options.InstallerPullDelay
	// on this machine: a slow registry or link. MachineService.Upgrade
	// answers only after it (the pull happens inside the call), and a
	// caller whose deadline comes first gets DeadlineExceeded and no
	// upgrade; ImageService.Pull streams progress meanwhile.
	InstallerPullDelay time.Duration
	// UpgradeBootFails makes the version an upgrade installed fail its boot
	// sequence: the machine comes up on it, stays booting without its
	// services for RebootDelay, then machined reverts the bootloader and
	// reboots, and it comes back on the version it ran before (main.go
	// handle, revertBootloader). It holds until cleared.
	UpgradeBootFails bool
	// EtcdSnapshotCorrupt flips one bit of the snapshot EtcdSnapshot
	// streams, inside the value of its newest key: the size stays right,
	// bbolt and etcdutl's status read the file, only its sha256 tells.
	EtcdSnapshotCorrupt bool
	// EtcdSnapshotCutAt ends EtcdSnapshot's stream with status OK after that
	// many bytes, as machined's Chunker does when its read from etcd breaks
	// off (pkg/chunker/stream); 0 streams it whole.
	EtcdSnapshotCutAt int
	// EtcdSnapshotData, when not nil, is streamed in place of the etcd
	// database: a control plane that is hostile or broken in a way no hash
	// catches (a crafted file with etcd's sha256 appended).
	EtcdSnapshotData []byte
	// EtcdRecoverCorrupt flips one bit of the database EtcdRecover writes
	// to /var/lib/etcd.snapshot, as a failing disk or memory would: the
	// upload a verified snapshot became no longer matches the sha256
	// etcd appended, so the restore fails after it wrote the data
	// directory (etcd_recover.go) and leaves data behind.
	EtcdRecoverCorrupt bool

	// CiliumAgentNotReady keeps the node's cilium agent pod Running but not
	// Ready (ContainersNotReady).
	CiliumAgentNotReady bool
	// CiliumAgentStarting keeps the node's cilium agent starting, as after
	// a boot for CNIStartDelay, until lifted: its pod Running but not Ready
	// and no CNI config written yet, so the kubelet reports the Node
	// NotReady for want of a network (a cluster rebuilt from a snapshot
	// whose agents still pull their image).
	CiliumAgentStarting bool
	// CiliumStatusReply replaces the agent's `cilium-dbg status -o json`
	// reply verbatim, e.g. with an older Cilium's shape.
	CiliumStatusReply string
	// CiliumControllersFailing names agent controllers that keep failing.
	CiliumControllersFailing []string
	// CiliumBackendsMissing names Services ("default/kubernetes") whose
	// frontends in the agent lack the last backend of their EndpointSlices.
	CiliumBackendsMissing []string
	// CiliumFrontendsStuck names Services whose frontends the agent never
	// reconciles: status Pending, or Error with the message when one is given.
	CiliumFrontendsStuck map[string]string
	// CiliumNoShell makes `cilium-dbg shell` fail, as on an agent built
	// without the statedb shell: only `service list` shows frontends.
	CiliumNoShell bool
	// CiliumPodNetworkBroken makes connections from the node's pod network
	// time out although every agent-side fact looks right: a datapath
	// failure only a transaction (devata drift --probe) sees.
	CiliumPodNetworkBroken bool
	// CoreDNSNotAnswering makes the CoreDNS pods on the machine's node
	// answer no query although they run and are Ready (a wedged process, a
	// Corefile that loops): a coredns-probe query Cilium sends only to them
	// times out (dnsprobe.go).
	CoreDNSNotAnswering bool
}

func (f Faults) clone() Faults {
	f.ErrorCodes = maps.Clone(f.ErrorCodes)
	f.CiliumControllersFailing = slices.Clone(f.CiliumControllersFailing)
	f.CiliumBackendsMissing = slices.Clone(f.CiliumBackendsMissing)
	f.CiliumFrontendsStuck = maps.Clone(f.CiliumFrontendsStuck)
	f.VolumeFailed = maps.Clone(f.VolumeFailed)
	f.VolumeMissing = slices.Clone(f.VolumeMissing)
	f.VolumeFilesystem = maps.Clone(f.VolumeFilesystem)
	f.VolumeSize = maps.Clone(f.VolumeSize)
	f.DisksMissing = slices.Clone(f.DisksMissing)
	f.DiskSignatures = maps.Clone(f.DiskSignatures)
	f.MountMissing = slices.Clone(f.MountMissing)
	f.PartitionMissing = slices.Clone(f.PartitionMissing)
	f.KubeletMountMissing = slices.Clone(f.KubeletMountMissing)
	f.KubeletMountOptions = maps.Clone(f.KubeletMountOptions)
	f.DriftedConfig = bytes.Clone(f.DriftedConfig)
	f.UpgradeImagesMissing = slices.Clone(f.UpgradeImagesMissing)

	return f
}
