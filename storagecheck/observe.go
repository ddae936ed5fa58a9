// Package storagecheck owns the storage evidence of a node: whether the active
// config declares the inventory's volumes, whether Talos made them ready with
// the right filesystem and size, whether they are mounted (for the kubelet too,
// where asked) and whether disks meant for Rook-Ceph are still blank. It reads
// what Talos reports; it never renders configs (bootstrap) nor dials (callers).
package storagecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	blockpb "github.com/siderolabs/talos/pkg/machinery/api/resource/definitions/block"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/proto"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Observation is what one pass read about a node's storage. Each fact carries
// its own error, so that one failed read makes only the checks that need it
// Unknown.
type Observation struct {
	// Err is set when the machine could not be reached at all: by Observe
	// when every read failed as unreachable, or by a caller that could not
	// dial it (or found it in maintenance mode).
	Err error

	// Volumes are the VolumeStatus resources by ID ("u-longhorn", "/dev/sdd-1").
	Volumes    map[string]Volume
	VolumesErr error

	// Mounts are the block MountStatus resources: what Talos mounted.
	Mounts    []Mount
	MountsErr error

	// Usage is the Mounts API's table (the kernel's view, with capacity).
	Usage    []Usage
	UsageErr error

	// KubeletFound is false when the node has no KubeletSpec (kubelet not configured).
	KubeletFound  bool
	KubeletMounts []KubeletMount
	KubeletErr    error

	// Discovered are the DiscoveredVolume resources: disks and partitions with
	// the signature blkid found on them.
	Discovered    []Discovered
	DiscoveredErr error

	// Disks are read only when the machine expects raw disks; DisksRead says they were.
	Disks     []Disk
	DisksRead bool
	// SystemDisk is the ID of the disk Talos is installed on ("" when not known).
	SystemDisk string
	DisksErr   error
}

// Volume is one VolumeStatus.
type Volume struct {
	ID             string
	Phase          string // waiting, failed, located, provisioned, prepared, ready, …
	PreFailPhase   string // the phase a failed volume was in
	ErrorMessage   string
	Location       string // the partition device
	ParentLocation string // its disk
	Filesystem     string
	Size           uint64
}

// Mount is one block MountStatus.
type Mount struct {
	ID, VolumeID, Source, Target, Filesystem string
	ReadOnly                                 bool
}

// Usage is one line of the Mounts API: Source is the mount source (a device),
// not the filesystem type.
type Usage struct {
	Source, Target  string
	Size, Available uint64
}

// KubeletMount is one extraMount of the KubeletSpec.
type KubeletMount struct {
	Source, Destination, Type string
	Options                   []string
}

// Discovered is one DiscoveredVolume.
type Discovered struct {
	ID, DevPath, Type, ParentDevPath string
	// Signature is what blkid found: a filesystem (xfs, ext4, …), a partition
	// table (gpt), bluestore, lvm2-pv, …; empty on a blank device.
	Signature      string
	PartitionLabel string
	Size           uint64
}

// Disk is one Disk resource, in the form Talos' CEL disk selectors read.
type Disk struct {
	ID   string
	Spec *blockpb.DiskSpec
}

// Observe reads a node's storage facts over one client whose endpoint is the
// node: VolumeStatus, MountStatus, DiscoveredVolume and KubeletSpec through
// COSI, the Mounts API, and Disk and SystemDisk when m expects raw disks. All
// reads are in flight together, so the cost is one round trip plus the
// slowest read. It never returns an error: failures are in the Observation.
func Observe(ctx context.Context, c *client.Client, m *inventory.Machine) *Observation {
	o := &Observation{}

	var wg sync.WaitGroup
	read := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	// Each read fills its own fields of o, so they need no lock.
	read(func() { o.readVolumes(ctx, c) })
	read(func() { o.readMounts(ctx, c) })
	read(func() { o.readUsage(ctx, c) })
	read(func() { o.readKubeletMounts(ctx, c) })
	read(func() { o.readDiscovered(ctx, c) })
	var disksErr, systemErr error
	if m != nil && len(m.RawDisks) > 0 {
		o.DisksRead = true
		read(func() { disksErr = o.readDisks(ctx, c) })
		read(func() { systemErr = o.readSystemDisk(ctx, c) })
	}
	wg.Wait()
	o.DisksErr = errors.Join(disksErr, systemErr)

	// A node that answered nothing is one unreachable machine, not six failed reads.
	errs := []error{o.VolumesErr, o.MountsErr, o.UsageErr, o.KubeletErr, o.DiscoveredErr}
	if o.DisksRead {
		errs = append(errs, o.DisksErr)
	}
	if !slices.ContainsFunc(errs, func(err error) bool { return !talosapi.IsUnreachable(err) }) {
		o.Err = fmt.Errorf("talos api: %w", o.VolumesErr)
	}

	return o
}

// readVolumes fills Volumes (or VolumesErr) from the VolumeStatus resources.
func (o *Observation) readVolumes(ctx context.Context, c *client.Client) {
	list, err := safe.StateListAll[*block.VolumeStatus](ctx, c.COSI)
	if err != nil {
		o.VolumesErr = fmt.Errorf("list VolumeStatus: %w", talosapi.PlainError(err))
		return
	}
	o.Volumes = make(map[string]Volume, list.Len())
	for r := range list.All() {
		s := r.TypedSpec()
		v := Volume{
			ID: r.Metadata().ID(), Phase: s.Phase.String(), ErrorMessage: s.ErrorMessage,
			Location: s.Location, ParentLocation: s.ParentLocation, Size: s.Size,
		}
		if s.Phase == block.VolumePhaseFailed {
			v.PreFailPhase = s.PreFailPhase.String()
		}
		if s.Filesystem != block.FilesystemTypeNone {
			v.Filesystem = s.Filesystem.String()
		}
		o.Volumes[v.ID] = v
	}
}

// readMounts fills Mounts (or MountsErr) from the MountStatus resources.
func (o *Observation) readMounts(ctx context.Context, c *client.Client) {
	list, err := safe.StateListAll[*block.MountStatus](ctx, c.COSI)
	if err != nil {
		o.MountsErr = fmt.Errorf("list MountStatus: %w", talosapi.PlainError(err))
		return
	}
	for r := range list.All() {
		s := r.TypedSpec()
		mnt := Mount{ID: r.Metadata().ID(), VolumeID: s.Spec.VolumeID, Source: s.Source, Target: s.Target, ReadOnly: s.ReadOnly}
		if s.Filesystem != block.FilesystemTypeNone {
			mnt.Filesystem = s.Filesystem.String()
		}
		o.Mounts = append(o.Mounts, mnt)
	}
}

// readUsage fills Usage (or UsageErr) from the Mounts API.
func (o *Observation) readUsage(ctx context.Context, c *client.Client) {
	resp, err := c.Mounts(ctx)
	if err != nil {
		o.UsageErr = fmt.Errorf("mounts: %w", talosapi.PlainError(err))
		return
	}
	for _, msg := range resp.GetMessages() {
		for _, st := range msg.GetStats() {
			o.Usage = append(o.Usage, Usage{Source: st.GetFilesystem(), Target: st.GetMountedOn(), Size: st.GetSize(), Available: st.GetAvailable()})
		}
	}
}

// readKubeletMounts fills KubeletFound and KubeletMounts (or KubeletErr)
// from the KubeletSpec; a node without one has KubeletFound false.
func (o *Observation) readKubeletMounts(ctx context.Context, c *client.Client) {
	ks, err := safe.StateGet[*k8s.KubeletSpec](ctx, c.COSI, resource.NewMetadata(k8s.NamespaceName, k8s.KubeletSpecType, k8s.KubeletID, resource.VersionUndefined))
	switch {
	case state.IsNotFoundError(err):
		return
	case err != nil:
		o.KubeletErr = fmt.Errorf("read KubeletSpec: %w", talosapi.PlainError(err))
		return
	}
	o.KubeletFound = true
	for _, em := range ks.TypedSpec().ExtraMounts {
		o.KubeletMounts = append(o.KubeletMounts, KubeletMount{Source: em.Source, Destination: em.Destination, Type: em.Type, Options: slices.Clone(em.Options)})
	}
}

// readDiscovered fills Discovered (or DiscoveredErr) from the
// DiscoveredVolume resources.
func (o *Observation) readDiscovered(ctx context.Context, c *client.Client) {
	list, err := safe.StateListAll[*block.DiscoveredVolume](ctx, c.COSI)
	if err != nil {
		o.DiscoveredErr = fmt.Errorf("list DiscoveredVolume: %w", talosapi.PlainError(err))
		return
	}
	for r := range list.All() {
		s := r.TypedSpec()
		o.Discovered = append(o.Discovered, Discovered{
			ID: r.Metadata().ID(), DevPath: s.DevPath, Type: s.Type, ParentDevPath: s.ParentDevPath,
			Signature: s.Name, PartitionLabel: s.PartitionLabel, Size: s.Size,
		})
	}
}

// readDisks fills Disks from the Disk resources. Its error joins
// readSystemDisk's in DisksErr.
func (o *Observation) readDisks(ctx context.Context, c *client.Client) error {
	list, err := safe.StateListAll[*block.Disk](ctx, c.COSI)
	if err != nil {
		return fmt.Errorf("list Disk: %w", talosapi.PlainError(err))
	}
	for r := range list.All() {
		spec := &blockpb.DiskSpec{}
		if err := proto.ResourceSpecToProto(r, spec); err != nil {
			return fmt.Errorf("disk %s: %w", r.Metadata().ID(), err)
		}
		o.Disks = append(o.Disks, Disk{ID: r.Metadata().ID(), Spec: spec})
	}
	return nil
}

// readSystemDisk fills SystemDisk from the SystemDisk resource; a node
// without one leaves it empty.
func (o *Observation) readSystemDisk(ctx context.Context, c *client.Client) error {
	sd, err := safe.StateGet[*block.SystemDisk](ctx, c.COSI, resource.NewMetadata(block.NamespaceName, block.SystemDiskType, block.SystemDiskID, resource.VersionUndefined))
	switch {
	case state.IsNotFoundError(err):
	case err != nil:
		return fmt.Errorf("read SystemDisk: %w", talosapi.PlainError(err))
	default:
		o.SystemDisk = sd.TypedSpec().DiskID
	}
	return nil
}
