package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"google.golang.org/grpc/codes"
	"gopkg.in/yaml.v3"
)

// FaultSpec is one machine's faults as a faults file spells them.
type FaultSpec struct {
	Unreachable      bool              `yaml:"unreachable"`
	Latency          time.Duration     `yaml:"latency"`
	ErrorCodes       map[string]string `yaml:"errorCodes"` // RPC method → gRPC code name, e.g. PermissionDenied
	TalosVersion     string            `yaml:"talosVersion"`
	KubeletUnhealthy bool              `yaml:"kubeletUnhealthy"`
	// DriftedConfigFile names a machine config (relative to the faults file)
	// to replace the applied one with, behind devata's back.
	DriftedConfigFile string            `yaml:"driftedConfigFile"`
	VolumeFailed      map[string]string `yaml:"volumeFailed"`
	VolumeMissing     []string          `yaml:"volumeMissing"`
	RebootDuringApply bool              `yaml:"rebootDuringApply"`

	// a slow installer pull, e.g. 2m (see Faults)
	InstallerPullDelay time.Duration `yaml:"installerPullDelay"`

	// etcd snapshot faults (see Faults)
	EtcdSnapshotCorrupt bool `yaml:"etcdSnapshotCorrupt"`
	EtcdSnapshotCutAt   int  `yaml:"etcdSnapshotCutAt"`
	EtcdRecoverCorrupt  bool `yaml:"etcdRecoverCorrupt"`

	// storage faults (see Faults); sizes take units, e.g. 50GiB
	VolumeFilesystem    map[string]string   `yaml:"volumeFilesystem"`
	VolumeSize          map[string]string   `yaml:"volumeSize"`
	DisksMissing        []string            `yaml:"disksMissing"`
	DiskSignatures      map[string]string   `yaml:"diskSignatures"`
	MountMissing        []string            `yaml:"mountMissing"`
	PartitionMissing    []string            `yaml:"partitionMissing"`
	KubeletMountMissing []string            `yaml:"kubeletMountMissing"`
	KubeletMountOptions map[string][]string `yaml:"kubeletMountOptions"`

	// cilium agent faults (see Faults)
	CiliumAgentNotReady      bool              `yaml:"ciliumAgentNotReady"`
	CiliumAgentStarting      bool              `yaml:"ciliumAgentStarting"`
	CiliumStatusReply        string            `yaml:"ciliumStatusReply"`
	CiliumControllersFailing []string          `yaml:"ciliumControllersFailing"`
	CiliumBackendsMissing    []string          `yaml:"ciliumBackendsMissing"`
	CiliumFrontendsStuck     map[string]string `yaml:"ciliumFrontendsStuck"`
	CiliumNoShell            bool              `yaml:"ciliumNoShell"`
	CiliumPodNetworkBroken   bool              `yaml:"ciliumPodNetworkBroken"`

	// CoreDNS fault (see Faults)
	CoreDNSNotAnswering bool `yaml:"coreDNSNotAnswering"`
}

// LoadFaultsFile reads a faults file: a YAML map from machine name to its
// faults. It is the whole desired fault state: machines it does not name have
// no faults.
func LoadFaultsFile(path string) (map[string]Faults, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var specs map[string]FaultSpec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&specs); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("faults file %s: %w", path, err)
	}
	out := map[string]Faults{}
	for name, s := range specs {
		f := Faults{
			Unreachable: s.Unreachable, Latency: s.Latency, TalosVersion: s.TalosVersion,
			KubeletUnhealthy: s.KubeletUnhealthy, VolumeFailed: s.VolumeFailed, VolumeMissing: s.VolumeMissing,
			RebootDuringApply: s.RebootDuringApply, InstallerPullDelay: s.InstallerPullDelay,
			EtcdSnapshotCorrupt: s.EtcdSnapshotCorrupt, EtcdSnapshotCutAt: s.EtcdSnapshotCutAt,
			EtcdRecoverCorrupt: s.EtcdRecoverCorrupt,
			VolumeFilesystem:   s.VolumeFilesystem, DisksMissing: s.DisksMissing, DiskSignatures: s.DiskSignatures,
			MountMissing: s.MountMissing, PartitionMissing: s.PartitionMissing,
			KubeletMountMissing: s.KubeletMountMissing, KubeletMountOptions: s.KubeletMountOptions,
			CiliumAgentNotReady: s.CiliumAgentNotReady, CiliumAgentStarting: s.CiliumAgentStarting, CiliumStatusReply: s.CiliumStatusReply,
			CiliumControllersFailing: s.CiliumControllersFailing, CiliumBackendsMissing: s.CiliumBackendsMissing,
			CiliumFrontendsStuck: s.CiliumFrontendsStuck, CiliumNoShell: s.CiliumNoShell,
			CiliumPodNetworkBroken: s.CiliumPodNetworkBroken, CoreDNSNotAnswering: s.CoreDNSNotAnswering,
		}
		for vol, sz := range s.VolumeSize {
			n, err := humanize.ParseBytes(sz)
			if err != nil {
				return nil, fmt.Errorf("faults file %s: %s.volumeSize.%s: %q is not a size, e.g. 50GiB", path, name, vol, sz)
			}
			if f.VolumeSize == nil {
				f.VolumeSize = map[string]uint64{}
			}
			f.VolumeSize[vol] = n
		}
		if len(s.ErrorCodes) > 0 {
			f.ErrorCodes = map[string]codes.Code{}
			for method, codeName := range s.ErrorCodes {
				c, ok := codeByName(codeName)
				if !ok {
					return nil, fmt.Errorf("faults file %s: %s.errorCodes.%s: unknown gRPC code %q (e.g. PermissionDenied, Unavailable)", path, name, method, codeName)
				}
				f.ErrorCodes[method] = c
			}
		}
		if s.DriftedConfigFile != "" {
			p := s.DriftedConfigFile
			if !filepath.IsAbs(p) {
				p = filepath.Join(filepath.Dir(path), p)
			}
			if f.DriftedConfig, err = os.ReadFile(p); err != nil {
				return nil, fmt.Errorf("faults file %s: %s.driftedConfigFile: %w", path, name, err)
			}
		}
		out[name] = f
	}
	return out, nil
}

func codeByName(name string) (codes.Code, bool) {
	for c := codes.OK; c <= codes.Unauthenticated; c++ {
		if c.String() == name {
			return c, true
		}
	}
	var c codes.Code
	if err := c.UnmarshalJSON([]byte(`"` + name + `"`)); err == nil {
		return c, true
	}
	return 0, false
}

// ApplyFaults sets every machine's faults from a faults map: named machines
// get theirs, the others none. Unknown machine names are an error, and then
// nothing changes.
func (f *Fleet) ApplyFaults(all map[string]Faults) error {
	for name := range all {
		if f.Machine(name) == nil {
			return fmt.Errorf("faults for unknown machine %q", name)
		}
	}
	for _, m := range f.Machines() {
		m.SetFaults(all[m.name])
	}
	return nil
}

// WatchFaultsFile applies a faults file now and whenever it changes, until
// ctx ends: the way to inject faults into a running `devata sim` from outside.
// A missing file means no faults; a bad file is reported through onErr and
// leaves the faults as they were.
func (f *Fleet) WatchFaultsFile(ctx context.Context, path string, interval time.Duration, onErr func(error)) {
	type stamp struct {
		mod  time.Time
		size int64
		ino  uint64 // a file renamed into place is new even within one mtime tick
	}
	missing := stamp{size: -1}
	applied, seen := missing, missing
	first := true
	check := func() {
		cur := missing
		st, err := os.Stat(path)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			onErr(err)
			return
		default:
			cur = stamp{mod: st.ModTime(), size: st.Size()}
			if sys, ok := st.Sys().(*syscall.Stat_t); ok {
				cur.ino = sys.Ino
			}
		}
		// An editor writing in place is seen mid-write as a short file: act
		// only on a file that looked the same on two looks in a row (or on
		// the very first look, so a file present at start applies at once).
		stable := cur == seen || first
		seen, first = cur, false
		if !stable || cur == applied {
			return
		}
		applied = cur
		if cur == missing {
			_ = f.ApplyFaults(nil)
			return
		}
		faults, err := LoadFaultsFile(path)
		if err == nil {
			err = f.ApplyFaults(faults)
		}
		if err != nil {
			onErr(err)
			return
		}
		f.log.Info("sim: faults applied", "file", path, "machines", len(faults))
	}
	every(ctx, interval, check)
}
