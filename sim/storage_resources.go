package sim

import (
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// hardwareResources are the Disk resources; the rest of the storage view
// (volumeResources) appears once the machine is configured.
func hardwareResources(s snapshot) []resource.Resource {
	var out []resource.Resource

	for _, d := range disksOf(s) {
		out = append(out, diskResource(s, d))
	}

	return out
}

// volumeResources derive what Talos' block controllers would show for the
// node's volumes: SystemDisk, DiscoveredVolume (per disk and per partition),
// VolumeStatus, and for every mounted volume block and runtime MountStatus.
func volumeResources(s snapshot) []resource.Resource {
	var out []resource.Resource
	st := storageOf(s)
	for _, l := range st.disks {
		out = append(out, diskResources(l)...)
	}
	for _, v := range st.vols {
		out = append(out, volumeStatusResources(v)...)
	}
	return out
}

// diskResources are a disk's SystemDisk (when it is the system disk) and
// the DiscoveredVolume of the disk and of each of its partitions.
func diskResources(l *layout) []resource.Resource {
	var out []resource.Resource
	if l.system {
		sd := block.NewSystemDisk(block.NamespaceName, block.SystemDiskID)
		sd.TypedSpec().DiskID = l.id()
		sd.TypedSpec().DevPath = l.dev
		out = append(out, sd)
	}

	dv := block.NewDiscoveredVolume(block.NamespaceName, l.id())
	dv.TypedSpec().DevPath = l.dev
	dv.TypedSpec().Type = "disk"
	dv.TypedSpec().DevicePath = l.dev
	dv.TypedSpec().SetSize(l.size)
	dv.TypedSpec().SectorSize = sectorSize
	dv.TypedSpec().IOSize = sectorSize
	dv.TypedSpec().Name = l.signature()
	out = append(out, dv)

	for _, p := range l.parts {
		dev := partition(l.dev, p.index)
		dv := block.NewDiscoveredVolume(block.NamespaceName, strings.TrimPrefix(dev, "/dev/"))
		dv.TypedSpec().DevPath = dev
		dv.TypedSpec().Type = "partition"
		dv.TypedSpec().DevicePath = dev
		dv.TypedSpec().Parent = l.id()
		dv.TypedSpec().ParentDevPath = l.dev
		dv.TypedSpec().SetSize(p.size)
		dv.TypedSpec().SectorSize = sectorSize
		dv.TypedSpec().IOSize = sectorSize
		dv.TypedSpec().PartitionIndex = uint(p.index)
		dv.TypedSpec().PartitionLabel = p.label
		dv.TypedSpec().Name = p.sig
		out = append(out, dv)
	}
	return out
}

// volumeStatusResources are a volume's VolumeStatus and, when it is
// mounted, its block and runtime MountStatus.
func volumeStatusResources(v volume) []resource.Resource {
	vs := block.NewVolumeStatus(block.NamespaceName, v.id)
	vs.TypedSpec().Type = block.VolumeTypePartition
	vs.TypedSpec().MountSpec = mountSpec(v)
	vs.TypedSpec().Phase = v.phase
	vs.TypedSpec().ErrorMessage = v.failed

	if v.phase == block.VolumePhaseFailed {
		vs.TypedSpec().PreFailPhase = v.preFail
	}

	if v.source != "" {
		vs.TypedSpec().Location = v.source
		vs.TypedSpec().ParentLocation = v.parent
		vs.TypedSpec().PartitionIndex = v.partIndex
		vs.TypedSpec().SetSize(v.size)

		// HandleEncryption sets the mount location on the way to prepared
		if v.ready() || v.preFail == block.VolumePhasePrepared {
			vs.TypedSpec().MountLocation = v.source
		}
	}

	if v.ready() {
		vs.TypedSpec().Filesystem = v.fs
	}

	if !v.mounted {
		return []resource.Resource{vs}
	}

	ms := block.NewMountStatus(block.NamespaceName, v.id)
	ms.TypedSpec().Spec = block.MountRequestSpec{VolumeID: v.id, Requesters: []string{"sim"}, RequesterIDs: []string{v.id}}
	ms.TypedSpec().Source = v.source
	ms.TypedSpec().Target = v.target
	ms.TypedSpec().Filesystem = v.fs

	legacy := runtime.NewMountStatus(runtime.NamespaceName, v.id)
	legacy.TypedSpec().Source = v.source
	legacy.TypedSpec().Target = v.target
	legacy.TypedSpec().FilesystemType = v.fs.String()
	return []resource.Resource{vs, ms, legacy}
}

// mountSpec is a VolumeStatus' mount spec: Talos mounts a machine.disks
// partition under /var relative to EPHEMERAL, the rest at its absolute path.
func mountSpec(v volume) block.MountSpec {
	if rel, ok := strings.CutPrefix(v.target, "/var/"); ok && v.legacy {
		return block.MountSpec{TargetPath: rel, ParentID: "EPHEMERAL"}
	}

	return block.MountSpec{TargetPath: v.target}
}
