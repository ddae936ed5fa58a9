package sim

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/block"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// The simulated hardware: a system disk Talos is installed on and a data
// disk that user volumes are carved from.
const (
	systemDiskSize = 256 << 30
	dataDisk       = "/dev/sdb"
	dataDiskSize   = 2 << 40
	mib            = 1 << 20
)

// volume is one volume as the node sees it.
type volume struct {
	id        string // VolumeStatus ID: "EPHEMERAL", "u-<name>"
	source    string // partition device
	parent    string // disk device
	partIndex int
	target    string
	fs        block.FilesystemType
	size      uint64
	failed    string // error message when the volume failed
}

func systemDisk(s snapshot) string {
	if s.active != nil && s.active.Machine() != nil {
		if d := s.active.Machine().Install().Disk(); d != "" {
			return d
		}
	}

	return "/dev/sda"
}

// partition names a disk's n-th partition the way Linux does.
func partition(disk string, n int) string {
	last := disk[len(disk)-1]
	if last >= '0' && last <= '9' {
		return fmt.Sprintf("%sp%d", disk, n)
	}

	return fmt.Sprintf("%s%d", disk, n)
}

// volumesOf lists the node's volumes: the system ones once installed, and
// one per UserVolumeConfig document, sized to its maxSize, or else an even
// share of the data disk (never below its minSize).
func volumesOf(s snapshot) []volume {
	if s.active == nil {
		return nil
	}

	sys := systemDisk(s)
	vols := []volume{
		{id: "STATE", source: partition(sys, 3), parent: sys, partIndex: 3, target: "/system/state", fs: block.FilesystemTypeXFS, size: 100 * mib},
		{id: "EPHEMERAL", source: partition(sys, 4), parent: sys, partIndex: 4, target: "/var", fs: block.FilesystemTypeXFS, size: systemDiskSize - 2200*mib},
	}

	users := s.active.UserVolumeConfigs()

	for i, uv := range users {
		name := uv.Name()
		if slices.Contains(s.faults.VolumeMissing, name) {
			continue
		}

		size := uint64(dataDiskSize/len(users)) / mib * mib
		if maxSize, ok := uv.Provisioning().MaxSize().Get(); ok && maxSize > 0 {
			size = maxSize
		}

		if minSize, ok := uv.Provisioning().MinSize().Get(); ok && size < minSize {
			size = minSize
		}

		fs := block.FilesystemTypeXFS
		if uv.Filesystem() != nil && uv.Filesystem().Type() != block.FilesystemTypeNone {
			fs = uv.Filesystem().Type()
		}

		vols = append(vols, volume{
			id:        "u-" + name,
			source:    partition(dataDisk, i+1),
			parent:    dataDisk,
			partIndex: i + 1,
			target:    "/var/mnt/" + name,
			fs:        fs,
			size:      size,
			failed:    s.faults.VolumeFailed[name],
		})
	}

	return vols
}

// service is one Talos service as ServiceList and the Service resource show it.
type service struct {
	id      string
	state   string
	running bool
	healthy bool
	unknown bool // no health check
	message string
	events  []serviceEvent
}

type serviceEvent struct {
	msg   string
	state string
	ts    time.Time
}

// servicesOf lists the services of a configured node. etcd waits in
// Preparing until the node holds etcd data.
func servicesOf(s snapshot) []service {
	if s.active == nil {
		return nil
	}

	ids := []string{"apid", "auditd", "containerd", "cri", "dashboard", "kubelet", "machined", "syslogd", "udevd"}
	if s.controlPlane() {
		ids = append(ids, "etcd", "trustd")
		slices.Sort(ids)
	}

	noHealthCheck := map[string]bool{"auditd": true, "dashboard": true, "syslogd": true, "udevd": true}

	at := func(d time.Duration) time.Time { return s.booted.Add(d) }

	svcs := make([]service, 0, len(ids))

	for _, id := range ids {
		svc := service{id: id, state: "Running", running: true, healthy: true, unknown: noHealthCheck[id]}
		svc.events = []serviceEvent{
			{msg: "Starting service", state: "Preparing", ts: at(0)},
			{msg: "Service started as goroutine", state: "Running", ts: at(time.Second)},
		}

		if !svc.unknown {
			svc.message = "Health check successful"
			svc.events = append(svc.events, serviceEvent{msg: "Health check successful", state: "Running", ts: at(2 * time.Second)})
		}

		switch {
		case id == "etcd" && s.etcdID == 0:
			svc = service{id: id, state: "Preparing", unknown: true}
			svc.events = []serviceEvent{
				{msg: "Running pre state", state: "Preparing", ts: at(0)},
				{msg: "etcd is waiting to join the cluster, if this node is the first node in the cluster, please run `talosctl bootstrap` against one of the following IPs:\n" + "[" + s.host + "]", state: "Preparing", ts: at(time.Second)},
			}
		case id == "kubelet" && s.faults.KubeletUnhealthy:
			svc.healthy = false
			svc.message = "Get \"http://127.0.0.1:10248/healthz\": dial tcp 127.0.0.1:10248: connect: connection refused"
			svc.events = append(svc.events, serviceEvent{msg: "Health check failed: " + svc.message, state: "Running", ts: at(3 * time.Second)})
		}

		svcs = append(svcs, svc)
	}

	return svcs
}

// unmetConditions are the reasons MachineStatus gives for not being ready.
func unmetConditions(s snapshot) []runtime.UnmetCondition {
	var problems []string

	for _, svc := range servicesOf(s) {
		if svc.running && !svc.unknown && !svc.healthy {
			problems = append(problems, svc.id+" not healthy")
		}
	}

	if len(problems) == 0 {
		return nil
	}

	return []runtime.UnmetCondition{{Name: "services", Reason: strings.Join(problems, ", ")}}
}

// sync rewrites the machine's COSI resources from its current state.
func (m *Machine) sync() {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()

	managed, err := put(context.Background(), m.st, m.managed, desiredResources(m.snap()))
	m.managed = managed

	if err != nil {
		m.fleet.log.Error("sim: sync resources", "machine", m.name, "error", err)
	}
}

//nolint:gocognit,gocyclo,cyclop // one list, read top to bottom
func desiredResources(s snapshot) []resource.Resource {
	var out []resource.Resource

	// network
	if addr, err := netip.ParseAddr(s.host); err == nil {
		for _, id := range []resource.ID{network.NodeAddressDefaultID, network.NodeAddressCurrentID, network.NodeAddressRoutedID, network.NodeAddressAccumulativeID} {
			na := network.NewNodeAddress(network.NamespaceName, id)
			na.TypedSpec().Addresses = []netip.Prefix{netip.PrefixFrom(addr, addr.BitLen())}
			out = append(out, na)
		}
	}

	// hardware
	sys := systemDisk(s)

	for _, d := range []struct {
		dev  string
		size uint64
	}{{sys, systemDiskSize}, {dataDisk, dataDiskSize}} {
		disk := block.NewDisk(block.NamespaceName, strings.TrimPrefix(d.dev, "/dev/"))
		disk.TypedSpec().DevPath = d.dev
		disk.TypedSpec().Size = d.size
		disk.TypedSpec().PrettySize = prettySize(d.size)
		disk.TypedSpec().IOSize = 512
		disk.TypedSpec().SectorSize = 512
		disk.TypedSpec().Model = "SIM DISK"
		disk.TypedSpec().Serial = s.name + "-" + strings.TrimPrefix(d.dev, "/dev/")
		disk.TypedSpec().Transport = "sata"
		out = append(out, disk)
	}

	// status
	ms := runtime.NewMachineStatus()
	if s.active == nil {
		ms.TypedSpec().Stage = runtime.MachineStageMaintenance
		ms.TypedSpec().Status.Ready = true
	} else {
		ms.TypedSpec().Stage = runtime.MachineStageRunning
		ms.TypedSpec().Status.UnmetConditions = unmetConditions(s)
		ms.TypedSpec().Status.Ready = len(ms.TypedSpec().Status.UnmetConditions) == 0
	}

	out = append(out, ms)

	if s.active == nil {
		return out
	}

	// config
	out = append(out,
		config.NewMachineConfigWithID(s.active, config.ActiveID),
		config.NewMachineConfigWithID(s.persisted, config.PersistentID),
	)

	// volumes and mounts
	for _, v := range volumesOf(s) {
		dv := block.NewDiscoveredVolume(block.NamespaceName, strings.TrimPrefix(v.source, "/dev/"))
		dv.TypedSpec().DevPath = v.source
		dv.TypedSpec().Type = "partition"
		dv.TypedSpec().DevicePath = v.source
		dv.TypedSpec().Parent = strings.TrimPrefix(v.parent, "/dev/")
		dv.TypedSpec().ParentDevPath = v.parent
		dv.TypedSpec().Size = v.size
		dv.TypedSpec().PrettySize = prettySize(v.size)
		dv.TypedSpec().PartitionIndex = uint(v.partIndex)
		dv.TypedSpec().PartitionLabel = v.id

		if v.failed == "" {
			dv.TypedSpec().Name = v.fs.String()
		}

		out = append(out, dv)

		vs := block.NewVolumeStatus(block.NamespaceName, v.id)
		vs.TypedSpec().Type = block.VolumeTypePartition
		vs.TypedSpec().Location = v.source
		vs.TypedSpec().MountLocation = v.source
		vs.TypedSpec().ParentLocation = v.parent
		vs.TypedSpec().PartitionIndex = v.partIndex
		vs.TypedSpec().SetSize(v.size)
		vs.TypedSpec().MountSpec = block.MountSpec{TargetPath: v.target}

		if v.failed != "" {
			vs.TypedSpec().Phase = block.VolumePhaseFailed
			vs.TypedSpec().PreFailPhase = block.VolumePhaseProvisioned
			vs.TypedSpec().ErrorMessage = v.failed
		} else {
			vs.TypedSpec().Phase = block.VolumePhaseReady
			vs.TypedSpec().Filesystem = v.fs

			mount := runtime.NewMountStatus(runtime.NamespaceName, v.id)
			mount.TypedSpec().Source = v.source
			mount.TypedSpec().Target = v.target
			mount.TypedSpec().FilesystemType = v.fs.String()
			out = append(out, mount)
		}

		out = append(out, vs)
	}

	// services
	for _, svc := range servicesOf(s) {
		if !svc.running {
			continue // machined makes a Service resource once the service runs
		}

		r := v1alpha1.NewService(svc.id)
		r.TypedSpec().Running = true
		r.TypedSpec().Healthy = svc.healthy && !svc.unknown
		r.TypedSpec().Unknown = svc.unknown
		out = append(out, r)
	}

	// kubernetes
	if mc := s.active.Machine(); mc != nil {
		ks := k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID)
		ks.TypedSpec().Image = mc.Kubelet().Image()
		ks.TypedSpec().ExtraMounts = mc.Kubelet().ExtraMounts()
		ks.TypedSpec().ExpectedNodename = s.hostname()
		ks.TypedSpec().Args = []string{"--hostname-override=" + s.hostname()}
		out = append(out, ks)

		if kp := mc.Features().KubePrism(); kp.Enabled() {
			st := k8s.NewKubePrismStatuses(k8s.NamespaceName, k8s.KubePrismStatusesID)
			st.TypedSpec().Host = fmt.Sprintf("localhost:%d", kp.Port())
			st.TypedSpec().Healthy = true
			out = append(out, st)
		}
	}

	if cc := s.active.Cluster(); cc != nil && s.controlPlane() && s.etcdID != 0 {
		st := k8s.NewManifestStatus(k8s.ControlPlaneNamespaceName)
		st.TypedSpec().ManifestsApplied = manifestsOf(s)
		out = append(out, st)
	}

	return out
}

// manifestsOf names the bootstrap manifests machined would have applied.
func manifestsOf(s snapshot) []string {
	cc := s.active.Cluster()

	names := []string{
		"00-kubelet-bootstrapping-token",
		"01-csr-approver-role-binding",
		"01-csr-node-bootstrap",
		"01-csr-renewal-role-binding",
		"11-kube-config-in-cluster",
		"11-talos-node-rbac-template",
	}

	if cc.Network() != nil && cc.Network().CNI() != nil && cc.Network().CNI().Name() == "flannel" {
		names = append(names, "05-flannel")
	}

	if cc.Proxy() != nil && cc.Proxy().Enabled() {
		names = append(names, "10-kube-proxy")
	}

	if cc.CoreDNS() != nil && cc.CoreDNS().Enabled() {
		names = append(names, "11-core-dns", "11-core-dns-svc")
	}

	for _, im := range cc.InlineManifests() {
		names = append(names, "99-"+im.Name())
	}

	slices.Sort(names)

	return names
}

func prettySize(n uint64) string {
	const unit = 1000

	if n < unit {
		return fmt.Sprintf("%d B", n)
	}

	div, exp := uint64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}

	return fmt.Sprintf("%.0f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
