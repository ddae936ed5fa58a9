// Package inventory owns devata's declarative inventory: the v1alpha1 schema,
// strict decoding with source positions, defaulting and validation. It does not
// render Talos configs (bootstrap does) and never talks to a machine.
package inventory

import (
	"fmt"
	"path/filepath"
)

// APIVersion and Kind identify an inventory document.
const (
	APIVersion = "devata.dev/v1alpha1"
	Kind       = "Inventory"
)

// Roles a machine can have.
const (
	RoleControlPlane = "controlplane"
	RoleWorker       = "worker"
)

// Inventory is the spec of a cluster: only the user writes it.
type Inventory struct {
	APIVersion string    `required:"true" yaml:"apiVersion" json:"apiVersion" doc:"Always devata.dev/v1alpha1."`
	Kind       string    `required:"true" yaml:"kind" json:"kind" doc:"Always Inventory."`
	Cluster    Cluster   `required:"true" yaml:"cluster" json:"cluster" doc:"Cluster-wide settings."`
	Machines   []Machine `required:"true" yaml:"machines" json:"machines" doc:"Every machine of the cluster."`
	Groups     []Group   `yaml:"groups" json:"groups" doc:"Machine groups: patches, node labels and taints for every machine a label selector picks, applied between the role's and the machine's own, in the order the groups are listed."`

	// Path is the file the inventory was loaded from; patch paths are relative to its directory.
	Path string `yaml:"-" json:"-"`
	// Warnings are findings that do not make the inventory invalid.
	Warnings []string `yaml:"-" json:"-"`

	byName map[string]int // index of Machines by name, built by Parse
}

// Cluster holds the settings shared by every machine.
type Cluster struct {
	Name               string              `required:"true" yaml:"name" json:"name" doc:"Cluster name (DNS-1123 label)."`
	Endpoint           string              `required:"true" yaml:"endpoint" json:"endpoint" doc:"Kubernetes API endpoint, an https URL with a port."`
	TalosVersion       string              `yaml:"talosVersion" json:"talosVersion" doc:"Talos version vX.Y.Z the machines should run (1.11 to 1.14; a 1.15 pre-release with a warning); selects the default install image and, until every machine runs it, the configs are written for the oldest version a machine runs. Default v1.11.0."`
	KubernetesVersion  string              `yaml:"kubernetesVersion" json:"kubernetesVersion" doc:"Kubernetes version vX.Y.Z. Default v1.34.1."`
	InstallImage       string              `yaml:"installImage" json:"installImage" doc:"Installer image for every machine; wins over schematics. Default: a machine's schematic's Image Factory installer, else ghcr.io/siderolabs/installer:<talosVersion> up to Talos 1.13, factory.talos.dev/metal-installer/<empty schematic>:<talosVersion> from 1.14."`
	ImageFactory       string              `yaml:"imageFactory" json:"imageFactory" doc:"Image Factory host that serves the installers of schematics (a private factory). Default factory.talos.dev."`
	Schematic          *Schematic          `yaml:"schematic" json:"schematic" doc:"Image Factory schematic of every machine's boot image (system extensions, extra kernel arguments, an overlay), unless its role or the machine has its own."`
	Secrets            string              `yaml:"secrets" json:"secrets" doc:"Path of the secrets bundle (talosctl gen secrets format), relative to the inventory. Default secrets.yaml."`
	Network            Network             `yaml:"network" json:"network" doc:"Cluster networking."`
	Cilium             Cilium              `yaml:"cilium" json:"cilium" doc:"What Cilium is expected to run with."`
	Patches            []string            `yaml:"patches" json:"patches" doc:"Config patch files applied to every machine, in order."`
	ReadableDirs       []string            `yaml:"readableDirs" json:"readableDirs" doc:"Absolute directories besides the inventory's own that patches and the secrets bundle may be read from (e.g. a mounted Secret); any other path outside the inventory's directory is refused."`
	ControlPlane       RoleOptions         `yaml:"controlPlane" json:"controlPlane" doc:"Settings for control-plane machines."`
	Workers            RoleOptions         `yaml:"workers" json:"workers" doc:"Settings for worker machines."`
	MaintenanceWindows []MaintenanceWindow `yaml:"maintenanceWindows" json:"maintenanceWindows" doc:"Weekly windows in which devata reconcile may make disruptive changes (a change that reboots a machine, an upgrade); outside them it reports what waits for which window. None: at any time. apply and upgrade at the console are not limited."`

	// installImageGiven: InstallImage was written, not defaulted (Default).
	installImageGiven bool
}

// Network describes the cluster network as Talos configures it.
type Network struct {
	CNI            string   `yaml:"cni" json:"cni" enum:"none,flannel" doc:"CNI Talos installs: none (Cilium installed separately) or flannel. Default none."`
	KubeProxy      *bool    `yaml:"kubeProxy" json:"kubeProxy" doc:"Whether Talos deploys kube-proxy. Default false."`
	PodSubnets     []string `yaml:"podSubnets" json:"podSubnets" doc:"Pod CIDRs. Default [10.244.0.0/16]."`
	ServiceSubnets []string `yaml:"serviceSubnets" json:"serviceSubnets" doc:"Service CIDRs. Default [10.96.0.0/12]."`
	DNSDomain      string   `yaml:"dnsDomain" json:"dnsDomain" doc:"Cluster DNS domain. Default cluster.local."`
}

// Cilium is what the Cilium agents are expected to run with.
type Cilium struct {
	KubeProxyReplacement *bool  `yaml:"kubeProxyReplacement" json:"kubeProxyReplacement" doc:"Cilium replaces kube-proxy. Default true."`
	K8sServiceHost       string `yaml:"k8sServiceHost" json:"k8sServiceHost" doc:"API server host the agents use. Default localhost (KubePrism)."`
	K8sServicePort       int    `yaml:"k8sServicePort" json:"k8sServicePort" doc:"API server port the agents use. Default 7445 (KubePrism)."`
}

// RoleOptions are settings for all machines of one role.
type RoleOptions struct {
	Patches   []string   `yaml:"patches" json:"patches" doc:"Config patch files applied to every machine of this role, after the cluster patches."`
	Schematic *Schematic `yaml:"schematic" json:"schematic" doc:"Image Factory schematic of this role's machines, in place of the cluster's."`
}

// Schematic is an Image Factory schematic, as Image Factory defines it
// (github.com/siderolabs/image-factory pkg/schematic): what a machine's boot
// image carries besides Talos. Its installer is
// <imageFactory>/metal-installer/<schematic id>:<talosVersion>.
type Schematic struct {
	Overlay       *SchematicOverlay      `yaml:"overlay" json:"overlay" doc:"A board overlay (single-board computers)."`
	Customization SchematicCustomization `yaml:"customization" json:"customization" doc:"What the image adds to Talos."`
}

// SchematicOverlay is a schematic's board overlay.
type SchematicOverlay struct {
	Image string `required:"true" yaml:"image" json:"image" doc:"Overlay image, e.g. siderolabs/sbc-raspberrypi."`
	Name  string `required:"true" yaml:"name" json:"name" doc:"Overlay name, e.g. rpi_generic."`
}

// SchematicCustomization is what a schematic adds to Talos.
type SchematicCustomization struct {
	ExtraKernelArgs  []string            `yaml:"extraKernelArgs" json:"extraKernelArgs" doc:"Kernel arguments added to the boot command line, e.g. net.ifnames=0."`
	SystemExtensions SchematicExtensions `yaml:"systemExtensions" json:"systemExtensions" doc:"System extensions in the image."`
}

// SchematicExtensions are a schematic's system extensions.
type SchematicExtensions struct {
	OfficialExtensions []string `yaml:"officialExtensions" json:"officialExtensions" doc:"Official extensions by name, e.g. siderolabs/iscsi-tools."`
}

// Machine is one Talos machine.
type Machine struct {
	Name                string               `required:"true" yaml:"name" json:"name" doc:"Machine name (DNS-1123 label); also its hostname and Kubernetes node name."`
	Role                string               `required:"true" yaml:"role" json:"role" enum:"controlplane,worker" doc:"controlplane or worker."`
	Address             string               `required:"true" yaml:"address" json:"address" doc:"Talos API address: an IP or DNS name, optionally with :port."`
	Port                int                  `yaml:"port" json:"port" doc:"Talos API port. Default 50000, or the port given in address."`
	InstallDisk         string               `yaml:"installDisk" json:"installDisk" doc:"Install disk device path, e.g. /dev/nvme0n1. Exactly one of installDisk and installDiskSelector."`
	InstallDiskSelector *InstallDiskSelector `yaml:"installDiskSelector" json:"installDiskSelector" doc:"Select the install disk by its properties instead of a path."`
	Patches             []string             `yaml:"patches" json:"patches" doc:"Config patch files for this machine, applied last."`
	Labels              map[string]string    `yaml:"labels" json:"labels" doc:"Kubernetes node labels; they win over a group's. On a worker, labels the NodeRestriction admission plugin forbids its kubelet to set are refused (viaKubernetes.labels takes them)."`
	Taints              map[string]string    `yaml:"taints" json:"taints" doc:"Kubernetes node taints as Talos writes them (machine.nodeTaints): key to value:Effect, or Effect alone (NoSchedule, PreferNoSchedule, NoExecute); they win over a group's."`
	ViaKubernetes       ViaKubernetes        `yaml:"viaKubernetes" json:"viaKubernetes" doc:"Node labels and taints devata sets on the Node itself through the Kubernetes API (with its admin kubeconfig), not rendered into the Talos config: for those NodeRestriction forbids a worker's kubelet to set. They win over a group's."`
	Volumes             []Volume             `yaml:"volumes" json:"volumes" doc:"User volumes, rendered as UserVolumeConfig and expected at /var/mnt/<name>."`
	Mounts              []Mount              `yaml:"mounts" json:"mounts" doc:"Further mounts the machine must have (from a patch: machine.disks, an ExistingVolumeConfig, …); checked, never rendered."`
	RawDisks            []RawDisk            `yaml:"rawDisks" json:"rawDisks" doc:"Disks that must stay blank (no partitions, no filesystem signature), e.g. for Rook-Ceph OSDs; checked, never rendered."`
	Schematic           *Schematic           `yaml:"schematic" json:"schematic" doc:"Image Factory schematic of this machine's boot image, in place of its role's or the cluster's."`
	Hold                *Hold                `yaml:"hold" json:"hold" doc:"Hold the machine: apply, upgrade and reconcile observe and report it but never change it (apply --machines NAME --ignore-hold at the console does)."`
	MaintenanceWindows  []string             `yaml:"maintenanceWindows" json:"maintenanceWindows" doc:"Names of the cluster.maintenanceWindows that apply to this machine. Default: all of them."`

	// Groups names the groups whose selector picks the machine, in the
	// inventory's order (set by Parse; see groups.go).
	Groups []string `yaml:"-" json:"-"`
	// nodeLabels and nodeTaints are the labels and taints of its groups
	// and its own, merged by Parse; nil without groups. kubeLabels and
	// kubeTaints are the same of viaKubernetes.
	nodeLabels, nodeTaints map[string]string
	kubeLabels, kubeTaints map[string]string
	// groupHold is the first of its groups' holds, named by its group
	// (ActiveHold); groupWindows its groups' maintenanceWindows (WindowsOf).
	groupHold    *Hold
	groupWindows []string
}

// Group gives every machine its selector picks the same patches, node labels,
// taints and rollout limit, so that fifty storage nodes need one patch.
type Group struct {
	Name               string            `required:"true" yaml:"name" json:"name" doc:"Group name (DNS-1123 label), unique."`
	Selector           GroupSelector     `required:"true" yaml:"selector" json:"selector" doc:"Which machines belong to the group: all of matchLabels, over the machines' own labels, and the role when given."`
	Patches            []string          `yaml:"patches" json:"patches" doc:"Config patch files applied to the group's machines after the cluster's and the role's, before the machine's own; groups apply in the order they are listed."`
	Labels             map[string]string `yaml:"labels" json:"labels" doc:"Kubernetes node labels for the group's machines; a machine's own labels win, and two groups may not set one label differently on a machine."`
	Taints             map[string]string `yaml:"taints" json:"taints" doc:"Kubernetes node taints for the group's machines, as in a machine's taints; a machine's own win, and two groups may not set one taint differently on a machine."`
	ViaKubernetes      ViaKubernetes     `yaml:"viaKubernetes" json:"viaKubernetes" doc:"Node labels and taints devata sets through the Kubernetes API on the group's machines' Nodes, as a machine's viaKubernetes; a machine's own win, and two groups may not set one differently on a machine."`
	Rollout            GroupRollout      `yaml:"rollout" json:"rollout" doc:"How apply and reconcile roll changes out to the group's machines."`
	Hold               *Hold             `yaml:"hold" json:"hold" doc:"Hold every machine of the group, as a machine's hold does (a machine's own hold wins)."`
	MaintenanceWindows []string          `yaml:"maintenanceWindows" json:"maintenanceWindows" doc:"Names of the cluster.maintenanceWindows that apply to the group's machines (those of all its groups), unless a machine names its own."`
}

// ViaKubernetes are node labels and taints devata writes on the Node through
// the Kubernetes API rather than rendering them for Talos (see
// reconcile/nodeapi.go): NodeRestriction forbids a worker's kubelet, whose
// credentials Talos labels it with, to set them.
type ViaKubernetes struct {
	Labels map[string]string `yaml:"labels" json:"labels" doc:"Kubernetes node labels devata sets on the Node, any the Kubernetes API accepts (node-role.kubernetes.io/worker, node-restriction.kubernetes.io/…)."`
	Taints map[string]string `yaml:"taints" json:"taints" doc:"Kubernetes node taints devata sets on the Node, as a machine's taints: key to value:Effect, or Effect alone."`
}

// GroupSelector picks machines by their own labels (not those groups give
// them) and role.
type GroupSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels" json:"matchLabels" doc:"Labels a machine must carry in its own labels, each with this value."`
	Role        string            `yaml:"role" json:"role" enum:",controlplane,worker" doc:"controlplane or worker: only machines of this role. Default: either."`
}

// GroupRollout limits a rollout within one group.
type GroupRollout struct {
	MaxUnavailable int `yaml:"maxUnavailable" json:"maxUnavailable" doc:"At most this many of the group's workers changed at once, within the global --max-unavailable (control planes go one at a time anyway). Default: only the global limit."`
	// Order is read through Inventory.RolloutStage (rollout.go).
	Order []string `yaml:"order" json:"order" doc:"Names of the group's machines in the order apply, upgrade and reconcile change them: each starts only once those before it of its role are done (converged, failed or held); the group's machines not named follow the last one named. Control planes still go before workers. A machine may be in only one group with an order. Default: no order beyond the global one."`
}

// InstallDiskSelector mirrors Talos' machine.install.diskSelector.
type InstallDiskSelector struct {
	Size     string `yaml:"size" json:"size" doc:"Size match, e.g. '>= 500GB' or '1TB'."`
	Name     string `yaml:"name" json:"name" doc:"Refused: Talos v1.11 cannot select the install disk by name; use installDisk."`
	Model    string `yaml:"model" json:"model" doc:"Disk model (glob)."`
	Serial   string `yaml:"serial" json:"serial" doc:"Disk serial number (glob)."`
	Modalias string `yaml:"modalias" json:"modalias" doc:"Disk modalias (glob)."`
	UUID     string `yaml:"uuid" json:"uuid" doc:"Disk UUID (glob)."`
	WWID     string `yaml:"wwid" json:"wwid" doc:"Disk WWID (glob)."`
	Type     string `yaml:"type" json:"type" enum:",ssd,hdd,nvme,sd" doc:"Disk type: ssd, hdd, nvme or sd."`
	BusPath  string `yaml:"busPath" json:"busPath" doc:"Disk bus path (glob)."`
}

// Volume is a user volume Talos provisions and mounts at /var/mnt/<name>.
type Volume struct {
	Name         string `required:"true" yaml:"name" json:"name" doc:"Volume name (DNS-1123 label); Talos calls it u-<name>."`
	MinSize      string `required:"true" yaml:"minSize" json:"minSize" doc:"Minimum size, e.g. 100GiB."`
	MaxSize      string `yaml:"maxSize" json:"maxSize" doc:"Maximum size, e.g. 1TiB. Default: grow to fill the disk."`
	Filesystem   string `yaml:"filesystem" json:"filesystem" enum:"xfs,ext4" doc:"Filesystem: xfs or ext4. Default xfs."`
	DiskSelector string `required:"true" yaml:"diskSelector" json:"diskSelector" doc:"CEL expression selecting the disk, e.g. '!system_disk'."`
	KubeletMount string `yaml:"kubeletMount" json:"kubeletMount" enum:",rw,ro" doc:"Mount the volume into the kubelet: rw or ro (bind, rshared). Default: not mounted."`
}

// Mount is a mount the machine is expected to have besides its volumes'. devata
// renders nothing for it: it only checks that Talos reports it.
type Mount struct {
	Path       string `required:"true" yaml:"path" json:"path" doc:"Absolute mount point, e.g. /var/mnt/legacy."`
	Filesystem string `yaml:"filesystem" json:"filesystem" enum:",xfs,ext4,vfat,iso9660" doc:"Expected filesystem type. Default: not checked."`
	MinSize    string `yaml:"minSize" json:"minSize" doc:"Smallest capacity the mount may have, e.g. 50GiB. Default: not checked."`
	ReadWrite  *bool  `yaml:"readWrite" json:"readWrite" doc:"Whether the mount must be read-write (true) or read-only (false). Default true."`
}

// RawDisk selects disks that must carry no partition table and no filesystem
// signature, so that an owner such as Rook-Ceph can claim them whole.
type RawDisk struct {
	Selector        string   `required:"true" yaml:"selector" json:"selector" doc:"CEL expression over the disk, as in Talos' diskSelector, e.g. 'disk.model == \"SAMSUNG MZ7\"' or 'disk.dev_path == \"/dev/sdc\"'."`
	MinCount        int      `yaml:"minCount" json:"minCount" doc:"How many disks the selector must match at least. Default 1."`
	AllowSignatures []string `yaml:"allowSignatures" json:"allowSignatures" doc:"Signatures that may be on a matched disk because its owner wrote them, e.g. bluestore or lvm2-pv for Rook-Ceph. Default: none."`
}

// IsControlPlane reports whether m is a control-plane machine.
func (m *Machine) IsControlPlane() bool { return m.Role == RoleControlPlane }

// Endpoint is the machine's Talos API address as host:port.
func (m *Machine) Endpoint() string { return joinHostPort(m.Address, m.Port) }

// InstallDiskType is the installDiskSelector's type, "" without one.
func (m *Machine) InstallDiskType() string {
	if m.InstallDiskSelector == nil {
		return ""
	}
	return m.InstallDiskSelector.Type
}

// index builds the name index Machine uses; the first machine of a name
// wins, as the linear scan does.
func (inv *Inventory) index() {
	inv.byName = make(map[string]int, len(inv.Machines))
	for i := range inv.Machines {
		if _, dup := inv.byName[inv.Machines[i].Name]; !dup {
			inv.byName[inv.Machines[i].Name] = i
		}
	}
}

// ControlPlanes returns the control-plane machines in inventory order.
func (inv *Inventory) ControlPlanes() []*Machine {
	var out []*Machine
	for i := range inv.Machines {
		if inv.Machines[i].IsControlPlane() {
			out = append(out, &inv.Machines[i])
		}
	}
	return out
}

// Machine returns the machine with the given name, or nil.
func (inv *Inventory) Machine(name string) *Machine {
	if i, ok := inv.byName[name]; ok && i < len(inv.Machines) && inv.Machines[i].Name == name {
		return &inv.Machines[i]
	}
	for i := range inv.Machines {
		if inv.Machines[i].Name == name {
			return &inv.Machines[i]
		}
	}
	return nil
}

// SecretsPath is the path of the cluster's secrets bundle: cluster.secrets,
// relative to the inventory's directory unless absolute.
func (inv *Inventory) SecretsPath() string {
	return ResolvePath(filepath.Dir(inv.Path), inv.Cluster.Secrets)
}

// Find returns the machine ref names: a machine name, else a machine's
// address or host:port endpoint (as talosctl -n takes nodes); nil if none.
func (inv *Inventory) Find(ref string) *Machine {
	if m := inv.Machine(ref); m != nil {
		return m
	}
	for i := range inv.Machines {
		if m := &inv.Machines[i]; m.Address == ref || m.Endpoint() == ref {
			return m
		}
	}
	return nil
}

// didYouMean is "; did you mean NAME?" for the machine whose name (or
// address) is nearest to ref, or "".
func (inv *Inventory) didYouMean(ref string) string {
	var refs []string
	for i := range inv.Machines {
		refs = append(refs, inv.Machines[i].Name, inv.Machines[i].Address)
	}
	if near := Nearest(ref, refs); near != "" {
		return fmt.Sprintf("; did you mean %q?", near)
	}
	return ""
}

// Resolve turns machine refs (names or addresses, see Find) into machine
// names, in the order given, or names the first ref no machine answers to.
func (inv *Inventory) Resolve(refs []string) ([]string, error) {
	names := make([]string, 0, len(refs))
	for _, ref := range refs {
		m := inv.Find(ref)
		if m == nil {
			return nil, fmt.Errorf("--machines: no machine named %q, or with that address, in %s%s", ref, inv.Path, inv.didYouMean(ref))
		}
		names = append(names, m.Name)
	}
	return names, nil
}
