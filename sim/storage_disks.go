package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// The simulated hardware: a system disk Talos is installed on, a data disk
// that user volumes are carved from, a blank spare disk (what Rook-Ceph
// would claim whole), and every other device the config's machine.disks
// names.
const (
	systemDiskSize = 256 << 30
	dataDisk       = "/dev/sdb"
	dataDiskSize   = 2 << 40
	spareDisk      = "/dev/sdc"
	spareDiskSize  = 1 << 40
	legacyDiskSize = 512 << 30
	mib            = 1 << 20
)

// blkidSignatures are the names go-blockdevice v2.0.19's probers give
// (blkid/internal/chain Default): all a DiscoveredVolume's name can be. There
// is no "dos": an MBR partition table, like any signature not listed, probes
// as blank, and Talos treats such a disk as empty.
var blkidSignatures = []string{
	"xfs", "ext4", "ext3", "ext2", "vfat", "iso9660", "squashfs", "talosmeta",
	"gpt", "bluestore", "luks", "swap", "lvm2-pv", "zfs",
}

// probed is what blkid reports for a signature written on a device.
func probed(sig string) string {
	if slices.Contains(blkidSignatures, sig) {
		return sig
	}

	return ""
}

// disk is one simulated disk.
type disk struct {
	dev    string
	size   uint64
	system bool
	// sig is what blkid finds on the whole disk before any volume is
	// provisioned: "" (blank), "gpt" or a Faults.DiskSignatures leftover.
	sig        string
	rotational bool
}

// transport is what the kernel reports for the device's bus.
func (d disk) transport() string {
	name := strings.TrimPrefix(d.dev, "/dev/")

	switch {
	case strings.HasPrefix(name, "nvme"):
		return "nvme"
	case strings.HasPrefix(name, "mmcblk"):
		return "mmc"
	case strings.HasPrefix(name, "vd"):
		return "virtio"
	default:
		return "sata"
	}
}

func (d disk) id() string { return strings.TrimPrefix(d.dev, "/dev/") }

func systemDisk(s snapshot) disk {
	sys := disk{dev: s.sysDisk.Device, size: systemDiskSize, system: true, sig: "gpt", rotational: s.sysDisk.Rotational}

	if s.active != nil && s.active.Machine() != nil {
		if d := s.active.Machine().Install().Disk(); d != "" && d != sys.dev {
			sys = disk{dev: d, size: systemDiskSize, system: true, sig: "gpt"}
		}
	}

	if sys.dev == "" {
		sys.dev = "/dev/sda"
	}

	return sys
}

// disksOf lists the machine's disks by ID, as Talos lists its Disk
// resources, less those Faults.DisksMissing took away.
func disksOf(s snapshot) []disk {
	sys := systemDisk(s)
	disks := []disk{sys}

	for _, d := range []disk{{dev: dataDisk, size: dataDiskSize}, {dev: spareDisk, size: spareDiskSize}} {
		if d.dev != sys.dev {
			disks = append(disks, d)
		}
	}

	if s.active != nil && s.active.Machine() != nil {
		for _, d := range s.active.Machine().Disks() {
			if !slices.ContainsFunc(disks, func(x disk) bool { return x.dev == d.Device() }) {
				disks = append(disks, disk{dev: d.Device(), size: legacyDiskSize})
			}
		}
	}

	for i := range disks {
		// Talos sits on the system disk: its GPT is not a fault's to change
		if sig, ok := s.faults.DiskSignatures[disks[i].dev]; ok && !disks[i].system {
			disks[i].sig = probed(sig)
		}
	}

	slices.SortFunc(disks, func(a, b disk) int { return cmp.Compare(a.id(), b.id()) })

	return slices.DeleteFunc(disks, func(d disk) bool { return slices.Contains(s.faults.DisksMissing, d.dev) })
}

func diskResource(s snapshot, d disk) *block.Disk {
	r := block.NewDisk(block.NamespaceName, d.id())
	r.TypedSpec().DevPath = d.dev
	r.TypedSpec().Size = d.size
	r.TypedSpec().PrettySize = prettySize(d.size)
	r.TypedSpec().IOSize = 512
	r.TypedSpec().SectorSize = 512
	r.TypedSpec().Model = "SIM DISK"
	r.TypedSpec().Serial = s.name + "-" + d.id()
	r.TypedSpec().Transport = d.transport()
	r.TypedSpec().Rotational = d.rotational

	return r
}

// partition names a disk's n-th partition the way Linux does.
func partition(disk string, n int) string {
	last := disk[len(disk)-1]
	if last >= '0' && last <= '9' {
		return fmt.Sprintf("%sp%d", disk, n)
	}

	return fmt.Sprintf("%s%d", disk, n)
}

// GPT geometry as go-blockdevice v2's partitioning/gpt lays it out
// (Table.init): 512-byte sectors, 128 entries of 128 bytes (32 sectors)
// after the primary header and before the backup one, partitions aligned to
// 1 MiB.
const (
	sectorSize     = 512
	gptEntrySecs   = 128 * 128 / sectorSize
	gptAlignment   = mib / sectorSize
	gptOverheadSec = 67 // CheckDiskForProvisioning: GPT + MBR
)

func alignUp(lba uint64) uint64 { return (lba + gptAlignment - 1) / gptAlignment * gptAlignment }

// part is one partition of a simulated disk.
type part struct {
	index int
	size  uint64
	label string
	// sig is what blkid finds on it: the filesystem, or "" (wiped by
	// CreatePartition and not formatted yet).
	sig string
}

// layout is one disk's partition table as the pass builds it: partitions
// are only ever appended, so the free space is the range after the last.
type layout struct {
	disk
	spec  *blockpb.DiskSpec // the Disk resource as CEL selectors read it
	gpt   bool              // the disk carries a GPT
	next  uint64            // first sector after the last partition
	parts []part
}

func newLayout(s snapshot, d disk) *layout {
	l := &layout{disk: d, spec: &blockpb.DiskSpec{}, gpt: d.sig == "gpt", next: alignUp(2 + gptEntrySecs)}
	if err := proto.ResourceSpecToProto(diskResource(s, d), l.spec); err != nil {
		l.spec = nil // a selector then fails on this disk, as it would on a Disk Talos cannot encode
	}

	return l
}

// available is gpt.Table.LargestContiguousAllocatable for an append-only
// table: from the aligned end of the last partition to the aligned last
// usable sector.
func (l *layout) available() uint64 {
	low := alignUp(l.next)
	lastUsable := l.size/sectorSize - 1 - gptEntrySecs - 1
	high := lastUsable / gptAlignment * gptAlignment

	if high <= low {
		return 0
	}

	return (high - low) * sectorSize
}

// allocate appends a partition as gpt.Table.AllocatePartition does.
func (l *layout) allocate(size uint64, label, sig string) *part {
	low := alignUp(l.next)
	l.next = low + size/sectorSize
	l.gpt = true
	l.parts = append(l.parts, part{index: len(l.parts) + 1, size: size, label: label, sig: sig})

	return &l.parts[len(l.parts)-1]
}

// signature is what blkid shows for the whole disk.
func (l *layout) signature() string {
	if l.gpt {
		return "gpt"
	}

	return l.sig
}

type rejectReason int

const (
	otherIssue rejectReason = iota
	notEnoughSpace
	wrongFormat
)

// fits is CheckDiskForProvisioning for a partition volume.
func (l *layout) fits(minSize uint64) (bool, rejectReason) {
	switch {
	case l.gpt:
		return l.available() >= minSize, notEnoughSpace
	case l.sig == "":
		return l.size >= minSize+gptOverheadSec*sectorSize, notEnoughSpace
	default:
		return false, wrongFormat
	}
}
