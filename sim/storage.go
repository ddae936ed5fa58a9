package sim

import (
	"fmt"
	"math"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/resources/block"
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
func storageOf(s snapshot) storage {
	if s.active == nil {
		return storage{}
	}

	f := s.faults

	var (
		st       storage
		sysKnown bool
	)

	st.disks, sysKnown = layoutsOf(s)

	st.vols = append(st.vols, stateVolume(st.disks))
	fullyProvisionedWave := math.MaxInt

	for _, vc := range volumeConfigsOf(s) {
		v := placeVolume(vc, st.disks, sysKnown, fullyProvisionedWave, f)

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

// layoutsOf lays out the machine's disks as the pass finds them: blank but
// for the installer's partitions on the system disk. sysKnown reports whether
// Talos knows its system disk (celMatch sets system_disk only then).
func layoutsOf(s snapshot) (disks []*layout, sysKnown bool) {
	for _, d := range disksOf(s) {
		l := newLayout(s, d)
		if d.system {
			sysKnown = true
			// the installer's partitions (UKI layout); EPHEMERAL comes next
			l.allocate(efiSize, "EFI", "vfat")
			l.allocate(metaSize, "META", "talosmeta")
			l.allocate(stateSize, "STATE", "xfs")
		}

		disks = append(disks, l)
	}

	return disks, sysKnown
}

// stateVolume is STATE, located where the installer made it; without a
// system disk no disk matches it.
func stateVolume(disks []*layout) volume {
	state := volume{id: "STATE", target: "/system/state", fs: block.FilesystemTypeXFS, phase: block.VolumePhaseFailed, preFail: block.VolumePhaseWaiting, failed: noDiskMatched}
	if i := slices.IndexFunc(disks, func(l *layout) bool { return l.system }); i >= 0 {
		l := disks[i]
		state.source, state.parent, state.partIndex, state.size = partition(l.dev, 3), l.dev, 3, stateSize
		state.phase, state.preFail, state.failed, state.mounted = block.VolumePhaseReady, 0, "", true
	}

	return state
}

// placeVolume is one turn of the volume manager's loop: the volume config's
// partition is located, else provisioned when the config's wave is not
// behind a volume that is not ready (or a fault says the partition existed
// before this boot), then formatted.
func placeVolume(vc volumeConfig, disks []*layout, sysKnown bool, fullyProvisionedWave int, f Faults) volume {
	v := volume{id: vc.id, name: vc.name, target: vc.target, fs: vc.fs, legacy: vc.legacy, phase: block.VolumePhaseWaiting}

	var (
		l *layout
		p *part
	)

	if vc.locate != nil {
		l, p = vc.locate(disks)
	}

	if p == nil && (vc.exists || vc.wave <= fullyProvisionedWave) {
		l, p = provision(vc, disks, sysKnown, v.fail)
	}

	if p != nil {
		v.format(vc, l, p, f)
	}

	return v
}

// format records the partition the volume got, applies the faults on a
// user volume's partition that existed before this boot (VolumeSize,
// VolumeFilesystem, VolumeFailed), then decides as Format does.
func (v *volume) format(vc volumeConfig, l *layout, p *part, f Faults) {
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
		v.fail(block.VolumePhaseProvisioned, msg)
		p.sig = ""
	case p.sig == "" || p.sig == "swap" || p.sig == vc.fs.String():
		// Format: blank (or swap) is formatted, the same filesystem kept
		p.sig = vc.fs.String()
		v.phase = block.VolumePhaseReady
	default:
		v.fail(block.VolumePhasePrepared, fmt.Sprintf(fsMismatch, p.sig, vc.fs))
	}
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
