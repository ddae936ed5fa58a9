package sim

import (
	"errors"
	"path/filepath"
	"slices"

	"github.com/hashicorp/go-multierror"
	"github.com/opencontainers/runtime-spec/specs-go"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
)

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
