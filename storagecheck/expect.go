package storagecheck

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config"
	cfgdoc "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	blockcfg "github.com/siderolabs/talos/pkg/machinery/config/types/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"

	"devata.dev/devata/inventory"
)

// expectedVolume is one volume the node must have: a user volume (from the
// inventory or a UserVolumeConfig a patch adds) or a legacy machine.disks
// partition of the desired config.
type expectedVolume struct {
	id     string // VolumeStatus ID: u-<name>, or <device>-<n> for machine.disks
	name   string // user volume name, or the partition's mount point
	target string // where it must be mounted
	legacy bool
	device string // legacy: the disk machine.disks names
	index  int    // legacy: the partition's 1-based index

	minSize    uint64 // 0: not checked
	filesystem string
	selector   string
	// kubeletMount is rw or ro when the kubelet must see the volume (bind, rshared).
	kubeletMount string

	order volumeOrder // where Talos provisions it
}

// volumeOrder is where a volume comes in Talos' provisioning order: volume
// configs listed by ID, sorted stably by wave, then those that do not grow,
// then by maxSize, none counting as the largest
// (internal/app/machined/pkg/controllers/block/internal/volumes/volumes.go
// CompareVolumeConfigs).
type volumeOrder struct {
	wave    int
	grow    bool
	maxSize uint64
	id      string
}

func (a volumeOrder) before(b volumeOrder) bool {
	if a.wave != b.wave {
		return a.wave < b.wave
	}
	if a.grow != b.grow {
		return !a.grow
	}
	if am, bm := cmp.Or(a.maxSize, math.MaxUint64), cmp.Or(b.maxSize, math.MaxUint64); am != bm {
		return am < bm
	}
	return a.id < b.id
}

// orderOf is the provisioning order of a VolumeStatus ID: an expected
// volume's, or the system disk's wave for Talos' own volumes.
func (e *expectations) orderOf(id string) (volumeOrder, bool) {
	for _, v := range e.volumes {
		if v.id == id {
			return v.order, true
		}
	}
	if slices.Contains([]string{"META", "STATE", "EPHEMERAL"}, id) {
		return volumeOrder{wave: block.WaveSystemDisk, grow: id == "EPHEMERAL", id: id}, true
	}
	return volumeOrder{}, false
}

func (v *expectedVolume) label() string {
	if v.legacy {
		return fmt.Sprintf("machine.disks %s partition %d (%s)", v.device, v.index, v.target)
	}
	return "volume " + v.name
}

// expectations is what one machine must have, from its inventory entry and
// its rendered config.
type expectations struct {
	volumes  []*expectedVolume
	mounts   []inventory.Mount
	rawDisks []inventory.RawDisk
	// desired is the rendered config, nil when none was given or it did not load.
	desired    config.Provider
	desiredErr error
	// desiredKubeletMounts are the destinations of the rendered config's
	// kubelet extraMounts.
	desiredKubeletMounts []string
}

// needsKubeletExtraMount says whether the active config must carry a kubelet
// extraMount for v. Talos bind-mounts /var/mnt into the kubelet itself
// (internal/app/machined/pkg/system/services/kubelet.go: rbind, rshared, ro),
// so a volume there that the kubelet only reads needs none; one is expected
// only when the rendered config has it.
func (e *expectations) needsKubeletExtraMount(v *expectedVolume) bool {
	switch {
	case v.kubeletMount == "":
		return false
	case v.kubeletMount == "ro" && underUserVolumes(v.target):
		return slices.Contains(e.desiredKubeletMounts, v.target)
	}
	return true
}

// userVolumesRoot is where Talos mounts user volumes, and what it always
// bind-mounts read-only into the kubelet.
const userVolumesRoot = "/var/mnt"

func underUserVolumes(path string) bool { return strings.HasPrefix(path, userVolumesRoot+"/") }

func (e *expectations) empty() bool {
	return len(e.volumes) == 0 && len(e.mounts) == 0 && len(e.rawDisks) == 0
}

// expect derives the expectations of a target. The rendered config is the
// source of what is declared (patches may add user volumes or machine.disks);
// the inventory adds what the config cannot say: kubelet mounts, further
// mounts and raw disks.
func expect(m *inventory.Machine, desired []byte) *expectations {
	e := &expectations{mounts: m.Mounts, rawDisks: m.RawDisks}
	if len(desired) > 0 {
		e.desired, e.desiredErr = configloader.NewFromBytes(desired)
		if e.desiredErr != nil {
			e.desired = nil
		}
	}
	if e.desired != nil {
		if mc := e.desired.Machine(); mc != nil {
			if k := e.desired.K8sKubeletConfig(); k != nil {
				for _, em := range k.ExtraMounts() {
					e.desiredKubeletMounts = append(e.desiredKubeletMounts, em.Destination)
				}
			}
			for _, d := range mc.Disks() {
				for i, p := range d.Partitions() {
					id := fmt.Sprintf("%s-%d", d.Device(), i+1)
					e.volumes = append(e.volumes, &expectedVolume{
						id: id, name: p.MountPoint(), target: p.MountPoint(),
						legacy: true, device: d.Device(), index: i + 1, minSize: p.Size(), filesystem: block.FilesystemTypeXFS.String(),
						order: volumeOrder{wave: block.WaveLegacyUserDisks + i, maxSize: p.Size(), id: id},
					})
				}
			}
		}
		for _, uv := range e.desired.UserVolumeConfigs() {
			e.volumes = append(e.volumes, userVolume(uv))
		}
	}
	for _, vol := range m.Volumes {
		i := slices.IndexFunc(e.volumes, func(v *expectedVolume) bool { return !v.legacy && v.name == vol.Name })
		if i < 0 {
			// not in the rendered config (none given, or a patch removed it): the inventory still expects it
			e.volumes = append(e.volumes, &expectedVolume{
				id: "u-" + vol.Name, name: vol.Name, target: "/var/mnt/" + vol.Name,
				minSize: parseSize(vol.MinSize), filesystem: vol.Filesystem, selector: vol.DiskSelector,
				order: volumeOrder{wave: block.WaveUserVolumes, maxSize: parseSize(vol.MaxSize), id: "u-" + vol.Name},
			})
			i = len(e.volumes) - 1
		}
		e.volumes[i].kubeletMount = vol.KubeletMount
	}
	return e
}

func userVolume(uv cfgdoc.UserVolumeConfig) *expectedVolume {
	v := &expectedVolume{id: "u-" + uv.Name(), name: uv.Name(), target: "/var/mnt/" + uv.Name(), filesystem: block.FilesystemTypeXFS.String()}
	v.order = volumeOrder{wave: block.WaveUserVolumes, id: v.id}
	if fs := uv.Filesystem(); fs != nil && fs.Type() != block.FilesystemTypeNone {
		v.filesystem = fs.Type().String()
	}
	if p := uv.Provisioning(); p != nil {
		v.minSize, _ = p.MinSize().Get()
		if sel, ok := p.DiskSelector().Get(); ok {
			v.selector = sel.String()
		}
		v.order.maxSize = p.MaxSize().ValueOrZero()
		v.order.grow = p.Grow().ValueOrZero()
	}
	return v
}

// describeUserVolume is the part of a UserVolumeConfig that decides what Talos
// provisions, on one line, for comparing the active with the desired one.
func describeUserVolume(uv cfgdoc.UserVolumeConfig) string {
	var minSize, maxSize, selector string
	grow := false
	if p := uv.Provisioning(); p != nil {
		if v, ok := p.MinSize().Get(); ok {
			minSize = humanize.IBytes(v)
		}
		if v, ok := p.MaxSize().Get(); ok {
			maxSize = humanize.IBytes(v)
		}
		if sel, ok := p.DiskSelector().Get(); ok {
			selector = sel.String()
		}
		grow, _ = p.Grow().Get()
	}
	fs := block.FilesystemTypeXFS.String()
	if f := uv.Filesystem(); f != nil && f.Type() != block.FilesystemTypeNone {
		fs = f.Type().String()
	}
	return fmt.Sprintf("diskSelector %q, minSize %s, maxSize %s, grow %t, filesystem %s", selector, orNone(minSize), orNone(maxSize), grow, fs)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func size(n uint64) string { return humanize.IBytes(n) }

func parseSelector(s string) (cel.Expression, error) {
	return cel.ParseBooleanExpression(s, celenv.DiskLocator())
}

// parseSize reads an inventory size; inventory.Load validated it.
func parseSize(s string) uint64 {
	var bs blockcfg.ByteSize
	if err := bs.UnmarshalText([]byte(s)); err != nil {
		return 0
	}
	return bs.Value()
}
