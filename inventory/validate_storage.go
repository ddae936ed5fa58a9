package inventory

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/config/types/block"
)

func (v *validator) validateVolumes(p string, vols []Volume) {
	seen := map[string]string{}
	for j := range vols {
		vol := &vols[j]
		vp := fmt.Sprintf("%s.volumes[%d]", p, j)
		switch {
		case vol.Name == "":
			v.errorf(vp+".name", "required")
		case len(vol.Name) > 34 || !volumeNameRE.MatchString(vol.Name):
			v.errorf(vp+".name", "%q: Talos volume names are 1-34 lowercase letters, digits and '-'", vol.Name)
		default:
			if first, dup := seen[vol.Name]; dup {
				v.errorf(vp+".name", "duplicate volume %q (also %s)", vol.Name, first)
			}
			seen[vol.Name] = vp
		}
		var minSize, maxSize uint64
		if vol.MinSize == "" {
			v.errorf(vp+".minSize", "required: the smallest size the volume may have, e.g. 100GiB")
		} else {
			minSize = v.byteSize(vp+".minSize", vol.MinSize)
		}
		if vol.MaxSize != "" {
			maxSize = v.byteSize(vp+".maxSize", vol.MaxSize)
			if minSize > 0 && maxSize > 0 && maxSize < minSize {
				v.errorf(vp+".maxSize", "%s is smaller than minSize %s", vol.MaxSize, vol.MinSize)
			}
		}
		if vol.Filesystem != "xfs" && vol.Filesystem != "ext4" {
			v.errorf(vp+".filesystem", "must be xfs or ext4, got %q", vol.Filesystem)
		}
		if strings.TrimSpace(vol.DiskSelector) == "" {
			v.errorf(vp+".diskSelector", "required: a CEL expression choosing the disk, e.g. '!system_disk'")
		} else if _, err := cel.ParseBooleanExpression(vol.DiskSelector, celenv.DiskLocator()); err != nil {
			v.errorf(vp+".diskSelector", "invalid CEL expression: %s", oneLine(err.Error()))
		}
		switch vol.KubeletMount {
		case "", "rw", "ro":
		default:
			v.errorf(vp+".kubeletMount", "must be rw or ro (or omitted), got %q", vol.KubeletMount)
		}
	}
}

func (v *validator) validateMounts(p string, m *Machine) {
	volumes := map[string]string{}
	for j, vol := range m.Volumes {
		volumes["/var/mnt/"+vol.Name] = fmt.Sprintf("%s.volumes[%d]", p, j)
	}
	seen := map[string]string{}
	for j := range m.Mounts {
		mnt := &m.Mounts[j]
		mp := fmt.Sprintf("%s.mounts[%d]", p, j)
		switch {
		case mnt.Path == "":
			v.errorf(mp+".path", "required: the absolute mount point, e.g. /var/mnt/legacy")
		case !strings.HasPrefix(mnt.Path, "/") || path.Clean(mnt.Path) != mnt.Path || mnt.Path == "/" || strings.ContainsAny(mnt.Path, " \t"):
			v.errorf(mp+".path", "%q is not a clean absolute mount point other than /, e.g. /var/mnt/legacy", mnt.Path)
		default:
			if vol, ok := volumes[mnt.Path]; ok {
				v.errorf(mp+".path", "%s is already expected as the mount of %s: list it once", mnt.Path, vol)
			} else if first, dup := seen[mnt.Path]; dup {
				v.errorf(mp+".path", "duplicate mount %s (also %s)", mnt.Path, first)
			}
			seen[mnt.Path] = mp
		}
		switch mnt.Filesystem {
		case "", "xfs", "ext4", "vfat", "iso9660":
		default:
			v.errorf(mp+".filesystem", "must be xfs, ext4, vfat or iso9660 (or omitted: not checked), got %q", mnt.Filesystem)
		}
		if mnt.MinSize != "" {
			v.byteSize(mp+".minSize", mnt.MinSize)
		}
	}
}

func (v *validator) validateRawDisks(p string, disks []RawDisk) {
	for j := range disks {
		d := &disks[j]
		dp := fmt.Sprintf("%s.rawDisks[%d]", p, j)
		if strings.TrimSpace(d.Selector) == "" {
			v.errorf(dp+".selector", "required: a CEL expression choosing the disks, e.g. 'disk.dev_path == \"/dev/sdc\"'")
		} else if _, err := cel.ParseBooleanExpression(d.Selector, celenv.DiskLocator()); err != nil {
			v.errorf(dp+".selector", "invalid CEL expression: %s", oneLine(err.Error()))
		}
		if d.MinCount < 1 {
			v.errorf(dp+".minCount", "must be at least 1, got %d", d.MinCount)
		}
		for k, sig := range d.AllowSignatures {
			sp := fmt.Sprintf("%s.allowSignatures[%d]", dp, k)
			switch {
			case !signatureRE.MatchString(sig):
				v.errorf(sp, "%q is not a signature name as Talos reports it, e.g. bluestore or lvm2-pv", sig)
			case sig == "gpt":
				v.errorf(sp, "%q is a partition table: a raw disk has none; remove it", sig)
			case sig == "dos":
				v.errorf(sp, "Talos never reports %q: go-blockdevice probes no MBR table, such a disk shows no signature (blank); remove it", sig)
			case !slices.Contains(blkidSignatures, sig):
				v.errorf(sp, "Talos never reports %q: the signatures it can see on a disk are %s", sig, strings.Join(blkidSignatures, ", "))
			}
		}
	}
}

func (v *validator) byteSize(path, s string) uint64 {
	var bs block.ByteSize
	if err := bs.UnmarshalText([]byte(s)); err != nil || bs.Value() == 0 {
		v.errorf(path, "%q is not a size: use a number with a unit, e.g. 100GiB or 500GB", s)
		return 0
	}
	return bs.Value()
}
