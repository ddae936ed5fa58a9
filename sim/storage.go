package sim

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/google/cel-go/cel"
	"github.com/hashicorp/go-multierror"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
)

// The node's storage is derived, on every sync, by replaying what Talos
// v1.11.0's volume manager does on a node whose disks start blank: one pass
// over the volume configs in Talos' order, each one located, provisioned,
// (not) encrypted and formatted the way the sources below say. Paths are
// relative to internal/app/machined/pkg/controllers/block in Talos v1.11.0
// unless they name another module.
//
//   - volume_manager.go, VolumeManagerController.Run: the volume configs are
//     listed by ID, sorted stably with volumes.CompareVolumeConfigs and
//     processed one at a time; once one is not ready, fullyProvisionedWave
//     drops below its wave, so a later volume that still has to be created
//     (even in the same wave) stays `waiting` without a message. An error
//     turns a volume `failed`, with PreFailPhase the phase it failed in.
//   - internal/volumes/volumes.go, CompareVolumeConfigs: by wave (system
//     disk -1, user volumes 0, machine.disks 1000000+index), then volumes
//     that do not grow first, then by maxSize, none counting as the largest.
//   - internal/volumes/locate.go, LocateAndProvision: the Disk resources are
//     tried in turn (listed by ID), every disk the selector matches is
//     checked, the first one that can take the volume is picked; none
//     matching fails with "no disks matched selector for volume", none fit
//     with "no disks matched for volume (N matched selector): …".
//   - internal/volumes/disk.go, CheckDiskForProvisioning: a blank disk fits
//     when it holds minSize plus 67 sectors of GPT, a GPT disk when its
//     largest free range holds minSize, any other signature is the wrong
//     format.
//   - internal/volumes/partition.go, CreatePartition: the partition takes
//     maxSize, or all the free space when maxSize is unset or larger.
//   - go-blockdevice v2.0.19 partitioning/gpt, Table.init, allocatableRanges
//     and AllocatePartition: 512-byte sectors, 128 entries, partitions
//     aligned to 1 MiB.
//   - internal/volumes/grow.go, Grow, only runs on a partition that was
//     located (it existed before this boot): a fresh one already has its
//     size, so on a blank-disk pass grow only changes the order.
//   - internal/volumes/format.go, Format: a blank partition (or swap) is
//     formatted, one with the expected filesystem is kept, any other fails
//     the volume with "filesystem type mismatch: <found> != <wanted>" while
//     `prepared` (HandleEncryption in encrypt.go set it).
//   - user_volume_config.go, handleUserVolumeConfig: UserVolumeConfig
//     `<name>` is volume `u-<name>`, partition label u-<name>, minSize at
//     least 100 MiB, filesystem xfs unless given.
//   - user_disk_config.go, processUserDiskPartition: machine.disks
//     partitions are `<device>-<n>`, on exactly that device, minSize =
//     maxSize = the partition's size (0: the rest of the disk), no label,
//     located by partition index.
//   - volume_config.go: EPHEMERAL (system disk, at least 2 GiB, grows,
//     bounded by a VolumeConfig document named EPHEMERAL) and STATE (100
//     MiB, created by the installer after EFI and META: the UKI layout).
//   - go-blockdevice v2.0.19 blkid/internal/chain, Default: the only
//     signatures a DiscoveredVolume can show (blkidSignatures).
//
// Faults then bend the pass (see storageOf).

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

// Talos' messages for a volume it could not place
// (internal/volumes/locate.go LocateAndProvision, partition.go
// CreatePartition) and for a partition that carries another filesystem
// (format.go Format).
const (
	noDiskMatched     = "no disks matched selector for volume"
	noDiskFits        = "no disks matched for volume (%d matched selector): %d have not enough space, %d have wrong format, %d have other issues"
	noSpaceOnDisk     = "error creating partition: not enough space on disk"
	tooSmallPartition = "error creating partition: error allocating partition: partition size must be greater than sector size"
	fsMismatch        = "filesystem type mismatch: %s != %s"
	locatorEvalError  = "error evaluating disk locator: %w"
)

// Sizes Talos gives its own partitions: machinery's imager/quirks
// PartitionSizes (UKI EFI = GRUB EFI + BIOS + BOOT), volume_config.go.
const (
	efiSize          = (100 + 1 + 2000) * mib
	metaSize         = 1 * mib
	stateSize        = 100 * mib
	ephemeralMinSize = 2 << 30
	minUserVolume    = 100 * mib // user_volume_config.go MinUserVolumeSize
)

// Volume waves (machinery resources/block/volume_config.go).
const (
	waveSystemDisk      = block.WaveSystemDisk
	waveUserVolumes     = block.WaveUserVolumes
	waveLegacyUserDisks = block.WaveLegacyUserDisks
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

// volume is one volume as the node sees it.
type volume struct {
	id        string // VolumeStatus ID: "EPHEMERAL", "u-<name>", "/dev/sdd-1"
	name      string // user volume name, or a machine.disks partition's mount point
	source    string // partition device; empty while no partition was found or made
	parent    string // disk device
	partIndex int
	target    string // where it is mounted
	fs        block.FilesystemType
	size      uint64
	phase     block.VolumePhase
	preFail   block.VolumePhase // the phase a failed volume failed in
	failed    string            // error message when the volume failed
	mounted   bool
	legacy    bool // a machine.disks partition
}

// ready reports whether Talos would mount the volume.
func (v volume) ready() bool { return v.phase == block.VolumePhaseReady }

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

// programs caches compiled disk selectors by their text: fleets share a few
// selectors, and compiling one costs far more than evaluating it.
var programs sync.Map // string → cel.Program

func diskProgram(expr string) (cel.Program, error) {
	if p, ok := programs.Load(expr); ok {
		return p.(cel.Program), nil //nolint:forcetypeassert // only programs are stored
	}

	env := celenv.DiskLocator()

	ast, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, iss.Err()
	}

	p, err := env.Program(ast)
	if err != nil {
		return nil, err
	}

	programs.Store(expr, p)

	return p, nil
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

// volumeConfig is what Talos' config controllers make of a volume document:
// the part of block.VolumeConfigSpec the pass reads.
type volumeConfig struct {
	id               string
	name             string
	wave             int
	match            func(l *layout, systemDiskKnown bool) (bool, error)
	locate           func(ls []*layout) (*layout, *part) // nil: locate by partition label id
	minSize, maxSize uint64
	grow             bool
	label            string
	fs               block.FilesystemType
	target           string
	legacy           bool
	// exists: a fault says the partition was there before this boot, so
	// Talos locates it whatever the volumes before it do.
	exists bool
}

// celMatch evaluates a disk selector against a disk's spec, as
// DiskContext.ToCELContext builds it: system_disk is only set once Talos
// knows its system disk.
func celMatch(expr string) func(*layout, bool) (bool, error) {
	prog, err := diskProgram(expr)

	return func(l *layout, systemDiskKnown bool) (bool, error) {
		switch {
		case err != nil:
			return false, err
		case l.spec == nil:
			return false, errors.New("disk " + l.id() + " has no spec")
		}

		vars := map[string]any{"disk": l.spec}
		if systemDiskKnown {
			vars["system_disk"] = l.system
		}

		out, _, err := prog.Eval(vars)
		if err != nil {
			return false, err
		}

		ok, _ := out.Value().(bool)

		return ok, nil
	}
}

// volumeConfigsOf lists the node's volume configs in the order Talos' volume
// manager processes them.
func volumeConfigsOf(s snapshot) []volumeConfig {
	f := s.faults

	var vcs []volumeConfig

	// EPHEMERAL, bounded by a VolumeConfig document of that name (volume_config.go)
	eph := volumeConfig{
		id: "EPHEMERAL", wave: waveSystemDisk, match: func(l *layout, _ bool) (bool, error) { return l.system, nil },
		minSize: ephemeralMinSize, grow: true, label: "EPHEMERAL", fs: block.FilesystemTypeXFS, target: "/var",
	}
	if vc, ok := s.active.Volumes().ByName("EPHEMERAL"); ok {
		p := vc.Provisioning()
		if sel, ok := p.DiskSelector().Get(); ok {
			eph.match = celMatch(sel.String())
		}

		eph.minSize = p.MinSize().ValueOr(eph.minSize)
		eph.maxSize = p.MaxSize().ValueOr(0)
		eph.grow = p.Grow().ValueOr(true)
	}

	vcs = append(vcs, eph)

	for _, uv := range s.active.UserVolumeConfigs() {
		name := uv.Name()
		if slices.Contains(f.VolumeMissing, name) {
			continue
		}

		p := uv.Provisioning()
		vc := volumeConfig{
			id: "u-" + name, name: name, wave: waveUserVolumes,
			minSize: cmp.Or(p.MinSize().ValueOrZero(), minUserVolume), maxSize: p.MaxSize().ValueOrZero(), grow: p.Grow().ValueOrZero(),
			label: "u-" + name, fs: uv.Filesystem().Type(), target: "/var/mnt/" + name,
		}

		if sel, ok := p.DiskSelector().Get(); ok {
			vc.match = celMatch(sel.String())
		} else {
			vc.match = func(*layout, bool) (bool, error) { return false, nil }
		}

		_, failed := f.VolumeFailed[name]
		_, wrongFS := f.VolumeFilesystem[name]
		_, resized := f.VolumeSize[name]
		vc.exists = failed || wrongFS || resized

		vcs = append(vcs, vc)
	}

	if mc := s.active.Machine(); mc != nil {
		for _, d := range mc.Disks() {
			for i, p := range d.Partitions() {
				dev, index := d.Device(), i+1
				vcs = append(vcs, volumeConfig{
					id: fmt.Sprintf("%s-%d", dev, index), name: p.MountPoint(), wave: waveLegacyUserDisks + i,
					match:   func(l *layout, _ bool) (bool, error) { return l.dev == dev, nil },
					locate:  legacyLocator(dev, index),
					minSize: p.Size(), maxSize: p.Size(), fs: block.FilesystemTypeXFS, target: p.MountPoint(), legacy: true,
				})
			}
		}
	}

	// the volume manager lists VolumeConfigs by ID, then sorts them stably
	slices.SortFunc(vcs, func(a, b volumeConfig) int { return cmp.Compare(a.id, b.id) })
	slices.SortStableFunc(vcs, compareVolumeConfigs)

	return vcs
}

// legacyLocator finds the n-th partition of a device, whoever made it
// (user_disk_config.go partitionIdxMatch): a user volume provisioned there
// first is taken for the machine.disks partition.
func legacyLocator(dev string, n int) func([]*layout) (*layout, *part) {
	return func(ls []*layout) (*layout, *part) {
		for _, l := range ls {
			if l.dev == dev && n <= len(l.parts) {
				return l, &l.parts[n-1]
			}
		}

		return nil, nil
	}
}

// compareVolumeConfigs is internal/volumes/volumes.go CompareVolumeConfigs.
func compareVolumeConfigs(a, b volumeConfig) int {
	if c := cmp.Compare(a.wave, b.wave); c != 0 {
		return c
	}

	if a.grow != b.grow {
		if a.grow {
			return 1
		}

		return -1
	}

	return cmp.Compare(cmp.Or(a.maxSize, math.MaxUint64), cmp.Or(b.maxSize, math.MaxUint64))
}

// storage is the outcome of the pass: the disks with their partitions and
// the volumes.
type storage struct {
	disks []*layout
	vols  []volume
}

// volumesOf lists the node's volumes (see storageOf).
func volumesOf(s snapshot) []volume { return storageOf(s).vols }

// storageOf replays Talos' volume manager over the node's config and disks
// (see the top of this file), then applies the storage faults:
//
//   - VolumeMissing: the user volume is not configured at all;
//   - VolumeFailed, VolumeFilesystem, VolumeSize: the user volume's partition
//     existed before this boot (so it is placed even behind a volume that is
//     not ready); VolumeFailed fails it after `provisioned` with the message,
//     VolumeFilesystem is what blkid finds on it (Format decides: the same
//     filesystem, blank, swap or a signature blkid cannot probe get the
//     volume formatted, anything else fails it), VolumeSize is its size;
//   - PartitionMissing: the machine.disks partition has no VolumeStatus;
//   - MountMissing: a ready volume is not mounted.
//
//nolint:gocognit,gocyclo,cyclop // one pass, read top to bottom
func storageOf(s snapshot) storage {
	if s.active == nil {
		return storage{}
	}

	f := s.faults
	var st storage

	sysKnown := false
	for _, d := range disksOf(s) {
		l := newLayout(s, d)
		if d.system {
			sysKnown = true
			// the installer's partitions (UKI layout); EPHEMERAL comes next
			l.allocate(efiSize, "EFI", "vfat")
			l.allocate(metaSize, "META", "talosmeta")
			l.allocate(stateSize, "STATE", "xfs")
		}

		st.disks = append(st.disks, l)
	}

	// STATE is located where the installer made it
	state := volume{id: "STATE", target: "/system/state", fs: block.FilesystemTypeXFS, phase: block.VolumePhaseFailed, preFail: block.VolumePhaseWaiting, failed: noDiskMatched}
	if i := slices.IndexFunc(st.disks, func(l *layout) bool { return l.system }); i >= 0 {
		l := st.disks[i]
		state.source, state.parent, state.partIndex, state.size = partition(l.dev, 3), l.dev, 3, stateSize
		state.phase, state.preFail, state.failed, state.mounted = block.VolumePhaseReady, 0, "", true
	}

	st.vols = append(st.vols, state)
	fullyProvisionedWave := math.MaxInt

	for _, vc := range volumeConfigsOf(s) {
		v := volume{id: vc.id, name: vc.name, target: vc.target, fs: vc.fs, legacy: vc.legacy, phase: block.VolumePhaseWaiting}
		fail := func(phase block.VolumePhase, msg string) {
			v.phase, v.preFail, v.failed = block.VolumePhaseFailed, phase, msg
		}

		var (
			l *layout
			p *part
		)

		if vc.locate != nil {
			l, p = vc.locate(st.disks)
		}

		if p == nil && (vc.exists || vc.wave <= fullyProvisionedWave) {
			l, p = provision(vc, st.disks, sysKnown, fail)
		}

		if p != nil {
			v.source, v.parent, v.partIndex, v.size = partition(l.dev, p.index), l.dev, p.index, p.size

			if size, ok := f.VolumeSize[vc.name]; ok && !vc.legacy {
				v.size, p.size = size, size
			}

			if found, ok := f.VolumeFilesystem[vc.name]; ok && !vc.legacy {
				p.sig = probed(found)
			}

			msg, failed := f.VolumeFailed[vc.name]

			switch {
			case failed && !vc.legacy:
				fail(block.VolumePhaseProvisioned, msg)
				p.sig = ""
			case p.sig == "" || p.sig == "swap" || p.sig == vc.fs.String():
				// Format: blank (or swap) is formatted, the same filesystem kept
				p.sig = vc.fs.String()
				v.phase = block.VolumePhaseReady
			default:
				fail(block.VolumePhasePrepared, fmt.Sprintf(fsMismatch, p.sig, vc.fs))
			}
		}

		if v.phase != block.VolumePhaseReady {
			fullyProvisionedWave = vc.wave - 1
		}

		v.mounted = v.ready() && !slices.Contains(f.MountMissing, vc.name)

		if vc.legacy && slices.Contains(f.PartitionMissing, vc.name) {
			continue
		}

		st.vols = append(st.vols, v)
	}

	return st
}

// provision is LocateAndProvision's provisioning half for a partition
// volume: the first disk the selector matches that can take minSize gets a
// partition of maxSize, or of all its free space.
func provision(vc volumeConfig, disks []*layout, sysKnown bool, fail func(block.VolumePhase, string)) (*layout, *part) {
	var matched []*layout

	for _, l := range disks {
		ok, err := vc.match(l, sysKnown)
		if err != nil {
			fail(block.VolumePhaseWaiting, fmt.Errorf(locatorEvalError, err).Error())

			return nil, nil
		}

		if ok {
			matched = append(matched, l)
		}
	}

	if len(matched) == 0 {
		fail(block.VolumePhaseWaiting, noDiskMatched)

		return nil, nil
	}

	var (
		picked   *layout
		rejected = map[rejectReason]int{}
	)

	for _, l := range matched {
		ok, why := l.fits(vc.minSize)
		if ok {
			picked = l

			break
		}

		rejected[why]++
	}

	if picked == nil {
		fail(block.VolumePhaseWaiting, fmt.Sprintf(noDiskFits, len(matched), rejected[notEnoughSpace], rejected[wrongFormat], rejected[otherIssue]))

		return nil, nil
	}

	available := picked.available()
	if available < vc.minSize {
		fail(block.VolumePhaseWaiting, noSpaceOnDisk)

		return nil, nil
	}

	size := available
	if vc.maxSize > 0 && vc.maxSize < available {
		size = vc.maxSize
	}

	// a machine.disks partition without a size on a full disk: gpt.Table.AllocatePartition refuses it
	if size < sectorSize {
		fail(block.VolumePhaseWaiting, tooSmallPartition)

		return nil, nil
	}

	return picked, picked.allocate(size, vc.label, "")
}

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
	}

	for _, v := range st.vols {
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

		out = append(out, vs)

		if !v.mounted {
			continue
		}

		ms := block.NewMountStatus(block.NamespaceName, v.id)
		ms.TypedSpec().Spec = block.MountRequestSpec{VolumeID: v.id, Requesters: []string{"sim"}, RequesterIDs: []string{v.id}}
		ms.TypedSpec().Source = v.source
		ms.TypedSpec().Target = v.target
		ms.TypedSpec().Filesystem = v.fs
		out = append(out, ms)

		legacy := runtime.NewMountStatus(runtime.NamespaceName, v.id)
		legacy.TypedSpec().Source = v.source
		legacy.TypedSpec().Target = v.target
		legacy.TypedSpec().FilesystemType = v.fs.String()
		out = append(out, legacy)
	}

	return out
}

// mountSpec is a VolumeStatus' mount spec: Talos mounts a machine.disks
// partition under /var relative to EPHEMERAL, the rest at its absolute path.
func mountSpec(v volume) block.MountSpec {
	if rel, ok := strings.CutPrefix(v.target, "/var/"); ok && v.legacy {
		return block.MountSpec{TargetPath: rel, ParentID: "EPHEMERAL"}
	}

	return block.MountSpec{TargetPath: v.target}
}

// statfs is what statfs(2) reports for a freshly made filesystem of type fs
// on a partition of size bytes, in bytes: f_blocks and f_bavail times
// f_bsize. A model, not a replay of mkfs:
//
//   - xfs: 4 KiB blocks; the kernel's statfs leaves the internal log out of
//     f_blocks (mkfs.xfs sizes it at 1/2048 of the filesystem, at least 64
//     MiB, at most 2 GiB; 10 MiB below 300 MiB), and a fresh filesystem's
//     metadata and per-AG btree reservations take about 1/128 of the rest
//     from f_bavail;
//   - ext4: 4 KiB blocks; f_blocks leaves out the inode tables (a 256-byte
//     inode per 16 KiB) and the journal (mke2fs' default size), f_bavail
//     also the 5% mke2fs reserves for root (Talos' makefs.Ext4 passes no
//     -m);
//   - anything else: the whole partition, all of it available.
func statfs(fs block.FilesystemType, size uint64) (total, avail uint64) {
	const blockSize = 4096

	blocks := size / blockSize
	sub := func(a, b uint64) uint64 { return a - min(a, b) }

	switch fs { //nolint:exhaustive // the rest has no overhead in this model
	case block.FilesystemTypeXFS:
		logBlocks := min(max(blocks/2048, 64*mib/blockSize), 2<<30/blockSize)
		if size < 300*mib {
			logBlocks = 10 * mib / blockSize
		}

		total = sub(blocks, logBlocks) * blockSize

		return total, sub(total, total/128/blockSize*blockSize)
	case block.FilesystemTypeEXT4:
		total = sub(blocks, blocks/64+ext4JournalBlocks(blocks)) * blockSize

		return total, sub(total, blocks*5/100*blockSize)
	default:
		return blocks * blockSize, blocks * blockSize
	}
}

// ext4JournalBlocks is e2fsprogs' default journal size for a filesystem of
// that many 4 KiB blocks (ext2fs_default_journal_size).
func ext4JournalBlocks(blocks uint64) uint64 {
	for _, step := range []struct{ below, journal uint64 }{
		{2048, 0}, {32768, 1024}, {256 << 10, 4096}, {512 << 10, 8192}, {4096 << 10, 16384},
		{8192 << 10, 32768}, {16384 << 10, 65536}, {32768 << 10, 131072},
	} {
		if blocks < step.below {
			return step.journal
		}
	}

	return 262144
}

// mountStats is machined's Mounts reply (internal/server/v1alpha1
// v1alpha1_server.go, Server.Mounts): a line per /proc/mounts entry, with
// the mount source as its filesystem and statfs' size and available bytes.
// When statfs fails on any mount point, machined returns its multierror
// (hashicorp/go-multierror) and gRPC drops the reply: the whole call fails,
// code Unknown. statfsFailed maps mount points to the error statfs gives
// there ("input/output error", "transport endpoint is not connected", …).
func mountStats(s snapshot, statfsFailed map[string]string) ([]*machine.MountStat, error) {
	stats := []*machine.MountStat{
		{Filesystem: "/dev/loop0", MountedOn: "/", Size: 80 * mib, Available: 0}, // the squashfs rootfs
		{Filesystem: "tmpfs", MountedOn: "/run", Size: 8 << 30, Available: 8<<30 - 4*mib},
	}

	for _, v := range volumesOf(s) {
		if !v.mounted {
			continue
		}

		total, avail := statfs(v.fs, v.size)
		stats = append(stats, &machine.MountStat{Filesystem: v.source, MountedOn: v.target, Size: total, Available: avail})
	}

	var errs *multierror.Error

	for _, st := range stats {
		if msg, ok := statfsFailed[st.MountedOn]; ok {
			errs = multierror.Append(errs, errors.New(msg))
			st.Size, st.Available = 0, 0
		}
	}

	if err := errs.ErrorOrNil(); err != nil {
		return nil, err
	}

	return stats, nil
}

// kubeletMounts are the config's kubelet extraMounts as KubeletSpec shows
// them, less Faults.KubeletMountMissing, with Faults.KubeletMountOptions.
// Talos' own kubelet mounts (system/services/kubelet.go, among them /var/mnt
// rbind,rshared,ro) are added when the kubelet starts and never appear in
// KubeletSpec.
func kubeletMounts(s snapshot, mounts []specs.Mount) []specs.Mount {
	var out []specs.Mount

	for _, m := range mounts {
		if slices.Contains(s.faults.KubeletMountMissing, filepath.Clean(m.Destination)) {
			continue
		}

		if opts, ok := s.faults.KubeletMountOptions[filepath.Clean(m.Destination)]; ok {
			m.Options = slices.Clone(opts)
		}

		out = append(out, m)
	}

	return out
}
