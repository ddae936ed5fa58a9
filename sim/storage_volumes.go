package sim

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

// Volume waves (machinery resources/block/volume_config.go).
const (
	waveSystemDisk      = block.WaveSystemDisk
	waveUserVolumes     = block.WaveUserVolumes
	waveLegacyUserDisks = block.WaveLegacyUserDisks
)

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

// fail turns the volume failed with msg, having failed in phase.
func (v *volume) fail(phase block.VolumePhase, msg string) {
	v.phase, v.preFail, v.failed = block.VolumePhaseFailed, phase, msg
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
