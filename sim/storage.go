package sim

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/google/cel-go/cel"
	"github.com/opencontainers/runtime-spec/specs-go"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
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

// Talos' message for a volume whose disk selector matched no disk
// (internal/app/machined/pkg/controllers/block/internal/volumes/locate.go).
const noDiskMatched = "no disks matched selector for volume"

// disk is one simulated disk.
type disk struct {
	dev    string
	size   uint64
	system bool
}

func (d disk) id() string { return strings.TrimPrefix(d.dev, "/dev/") }

// volume is one volume as the node sees it.
type volume struct {
	id        string // VolumeStatus ID: "EPHEMERAL", "u-<name>", "/dev/sdd-1"
	name      string // user volume name, or a machine.disks partition's mount point
	source    string // partition device; empty while no disk was found
	parent    string // disk device
	partIndex int
	target    string // where it is mounted
	fs        block.FilesystemType
	size      uint64
	failed    string // error message when the volume failed
	waiting   bool   // failed while waiting for a disk (PreFailPhase waiting)
	mounted   bool
	legacy    bool // a machine.disks partition
}

func systemDisk(s snapshot) string {
	if s.active != nil && s.active.Machine() != nil {
		if d := s.active.Machine().Install().Disk(); d != "" {
			return d
		}
	}

	return "/dev/sda"
}

// disksOf lists the machine's disks in the order Talos would try them, less
// those Faults.DisksMissing took away.
func disksOf(s snapshot) []disk {
	sys := systemDisk(s)
	disks := []disk{{dev: sys, size: systemDiskSize, system: true}}

	for _, d := range []disk{{dev: dataDisk, size: dataDiskSize}, {dev: spareDisk, size: spareDiskSize}} {
		if d.dev != sys {
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
	r.TypedSpec().Transport = "sata"

	return r
}

// matchDisk evaluates a volume's disk selector as Talos' volume manager
// does: against each disk's spec, with system_disk known once installed.
func matchDisk(s snapshot, disks []disk, eval func(*blockpb.DiskSpec, bool) (bool, error)) (disk, bool) {
	for _, d := range disks {
		spec := &blockpb.DiskSpec{}
		if err := proto.ResourceSpecToProto(diskResource(s, d), spec); err != nil {
			continue
		}

		if ok, err := eval(spec, d.system); err == nil && ok {
			return d, true
		}
	}

	return disk{}, false
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

// volumesOf lists the node's volumes: the system ones once installed, one
// per machine.disks partition, and one per UserVolumeConfig document on the
// first disk its selector matches, sized to its maxSize, or else an even
// share of that disk (never below its minSize). Faults bend the result.
//
//nolint:gocognit,gocyclo,cyclop // one list, read top to bottom
func volumesOf(s snapshot) []volume {
	if s.active == nil {
		return nil
	}

	f := s.faults
	disks := disksOf(s)
	sys := systemDisk(s)
	vols := []volume{
		{id: "STATE", source: partition(sys, 3), parent: sys, partIndex: 3, target: "/system/state", fs: block.FilesystemTypeXFS, size: 100 * mib, mounted: true},
		{id: "EPHEMERAL", source: partition(sys, 4), parent: sys, partIndex: 4, target: "/var", fs: block.FilesystemTypeXFS, size: systemDiskSize - 2200*mib, mounted: true},
	}
	nextIndex := map[string]int{}

	// legacy machine.disks: partitions in order, <device>-<n> as Talos names them
	if mc := s.active.Machine(); mc != nil {
		for _, d := range mc.Disks() {
			if !slices.ContainsFunc(disks, func(x disk) bool { return x.dev == d.Device() }) {
				continue
			}

			parts := d.Partitions()
			for i, p := range parts {
				nextIndex[d.Device()]++

				if slices.Contains(f.PartitionMissing, p.MountPoint()) {
					continue
				}

				size := p.Size()
				if size == 0 {
					size = legacyDiskSize / uint64(len(parts)) / mib * mib
				}

				vols = append(vols, volume{
					id:        fmt.Sprintf("%s-%d", d.Device(), i+1),
					name:      p.MountPoint(),
					source:    partition(d.Device(), i+1),
					parent:    d.Device(),
					partIndex: i + 1,
					target:    p.MountPoint(),
					fs:        block.FilesystemTypeXFS,
					size:      size,
					mounted:   !slices.Contains(f.MountMissing, p.MountPoint()),
					legacy:    true,
				})
			}
		}
	}

	// user volumes: each on the first disk its selector matches
	users := s.active.UserVolumeConfigs()
	placed := make([]disk, len(users))
	found := make([]bool, len(users))
	perDisk := map[string]int{}

	for i, uv := range users {
		expr, ok := uv.Provisioning().DiskSelector().Get()
		if !ok {
			continue
		}

		prog, err := diskProgram(expr.String())
		if err != nil {
			continue
		}

		placed[i], found[i] = matchDisk(s, disks, func(spec *blockpb.DiskSpec, system bool) (bool, error) {
			out, _, err := prog.Eval(map[string]any{"disk": spec, "system_disk": system})
			if err != nil {
				return false, err
			}

			ok, _ := out.Value().(bool)

			return ok, nil
		})
		if found[i] {
			perDisk[placed[i].dev]++
		}
	}

	for i, uv := range users {
		name := uv.Name()
		if slices.Contains(f.VolumeMissing, name) {
			continue
		}

		v := volume{id: "u-" + name, name: name, target: "/var/mnt/" + name, fs: block.FilesystemTypeXFS}
		if uv.Filesystem() != nil && uv.Filesystem().Type() != block.FilesystemTypeNone {
			v.fs = uv.Filesystem().Type()
		}

		minSize, hasMin := uv.Provisioning().MinSize().Get()

		switch {
		case !found[i]:
			v.failed, v.waiting = noDiskMatched, true
		case hasMin && minSize > placed[i].size:
			v.failed, v.waiting = "no disks matched for volume (1 matched selector): 1 have not enough space, 0 have wrong format, 0 have other issues", true
		default:
			d := placed[i]
			nextIndex[d.dev]++
			v.parent, v.partIndex = d.dev, nextIndex[d.dev]
			v.source = partition(d.dev, v.partIndex)

			v.size = d.size / uint64(perDisk[d.dev]) / mib * mib
			if maxSize, ok := uv.Provisioning().MaxSize().Get(); ok && maxSize > 0 {
				v.size = maxSize
			}

			if hasMin && v.size < minSize {
				v.size = minSize
			}

			if msg, ok := f.VolumeFailed[name]; ok {
				v.failed = msg
			}

			if fs, ok := f.VolumeFilesystem[name]; ok {
				if t, err := block.FilesystemTypeString(fs); err == nil {
					v.fs = t
				}
			}

			if size, ok := f.VolumeSize[name]; ok {
				v.size = size
			}

			v.mounted = v.failed == "" && !slices.Contains(f.MountMissing, name)
		}

		vols = append(vols, v)
	}

	return vols
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

	sys := systemDisk(s)
	disks := disksOf(s)

	if slices.ContainsFunc(disks, func(d disk) bool { return d.dev == sys }) {
		sd := block.NewSystemDisk(block.NamespaceName, block.SystemDiskID)
		sd.TypedSpec().DiskID = strings.TrimPrefix(sys, "/dev/")
		sd.TypedSpec().DevPath = sys
		out = append(out, sd)
	}

	vols := volumesOf(s)

	for _, d := range disks {
		dv := block.NewDiscoveredVolume(block.NamespaceName, d.id())
		dv.TypedSpec().DevPath = d.dev
		dv.TypedSpec().Type = "disk"
		dv.TypedSpec().DevicePath = d.dev
		dv.TypedSpec().SetSize(d.size)
		dv.TypedSpec().SectorSize = 512
		dv.TypedSpec().IOSize = 512

		if d.system || slices.ContainsFunc(vols, func(v volume) bool { return v.parent == d.dev }) {
			dv.TypedSpec().Name = "gpt"
		}

		if sig, ok := s.faults.DiskSignatures[d.dev]; ok {
			dv.TypedSpec().Name = sig
		}

		out = append(out, dv)
	}

	for _, v := range vols {
		vs := block.NewVolumeStatus(block.NamespaceName, v.id)
		vs.TypedSpec().Type = block.VolumeTypePartition
		vs.TypedSpec().MountSpec = mountSpec(v)

		if v.source != "" {
			dv := block.NewDiscoveredVolume(block.NamespaceName, strings.TrimPrefix(v.source, "/dev/"))
			dv.TypedSpec().DevPath = v.source
			dv.TypedSpec().Type = "partition"
			dv.TypedSpec().DevicePath = v.source
			dv.TypedSpec().Parent = strings.TrimPrefix(v.parent, "/dev/")
			dv.TypedSpec().ParentDevPath = v.parent
			dv.TypedSpec().SetSize(v.size)
			dv.TypedSpec().PartitionIndex = uint(v.partIndex)
			dv.TypedSpec().PartitionLabel = v.id

			if v.failed == "" {
				dv.TypedSpec().Name = v.fs.String()
			}

			out = append(out, dv)

			vs.TypedSpec().Location = v.source
			vs.TypedSpec().MountLocation = v.source
			vs.TypedSpec().ParentLocation = v.parent
			vs.TypedSpec().PartitionIndex = v.partIndex
			vs.TypedSpec().SetSize(v.size)
		}

		switch {
		case v.waiting:
			vs.TypedSpec().Phase = block.VolumePhaseFailed
			vs.TypedSpec().PreFailPhase = block.VolumePhaseWaiting
			vs.TypedSpec().ErrorMessage = v.failed
		case v.failed != "":
			vs.TypedSpec().Phase = block.VolumePhaseFailed
			vs.TypedSpec().PreFailPhase = block.VolumePhaseProvisioned
			vs.TypedSpec().ErrorMessage = v.failed
		default:
			vs.TypedSpec().Phase = block.VolumePhaseReady
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

// kubeletMounts are the config's kubelet extraMounts as KubeletSpec shows
// them, less Faults.KubeletMountMissing, with Faults.KubeletMountOptions.
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
