package inventory

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"
	"gopkg.in/yaml.v3"
	"k8s.io/apimachinery/pkg/util/validation"

	"devata.dev/devata/internal/talos"
)

var (
	versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$`)
	// a Talos version: a release, or a pre-release as Talos tags them
	talosVersionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)\.(?:0|[1-9][0-9]*)(-(?:alpha|beta|rc)\.(?:0|[1-9][0-9]*))?$`)
	looksNumeric   = regexp.MustCompile(`^[0-9.]+$`)
	volumeNameRE   = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)
	signatureRE    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	// blkidSignatures are the names go-blockdevice v2.0.19's probers give
	// (blkid/internal/chain, Default), all a DiscoveredVolume can show
	// besides gpt (sim/storage.go holds the same list).
	blkidSignatures = []string{"xfs", "ext4", "ext3", "ext2", "vfat", "iso9660", "squashfs", "talosmeta", "bluestore", "luks", "swap", "lvm2-pv", "zfs"}
)

// validator collects every finding of one inventory; it never stops at the first.
type validator struct {
	ctx   context.Context
	inv   *Inventory
	dir   string
	d     *decoder
	errs  []*FieldError
	warns []string
	// patchProblems caches each patch file's verdict: machines share a few
	// patches, and reading them once per machine made validate slow.
	patchProblems map[string]string
	// interrupted is set when ctx was done before every machine was seen
	interrupted *InterruptedError
}

func (v *validator) errorf(path, format string, args ...any) {
	if v.d.bad[path] {
		return // the decoder already said what is wrong here
	}
	v.errs = append(v.errs, &FieldError{File: v.d.file, Pos: v.position(path), Field: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) warnf(path, format string, args ...any) {
	e := &FieldError{File: v.d.file, Pos: v.position(path), Field: path, Msg: fmt.Sprintf(format, args...)}
	v.warns = append(v.warns, e.Error())
}

// position finds where path was written, or where its closest written parent was.
func (v *validator) position(path string) Pos {
	for p := path; p != ""; p = parentPath(p) {
		if pos, ok := v.d.pos[p]; ok {
			return pos
		}
	}
	return Pos{Line: 1, Column: 1}
}

func parentPath(p string) string {
	i := strings.LastIndexAny(p, ".[")
	if i < 0 {
		return ""
	}
	return p[:i]
}

func (v *validator) validate() {
	inv := v.inv
	if inv.APIVersion != APIVersion {
		v.errorf("apiVersion", "must be %q, got %q", APIVersion, inv.APIVersion)
	}
	if inv.Kind != Kind {
		v.errorf("kind", "must be %q, got %q", Kind, inv.Kind)
	}
	v.validateCluster(&inv.Cluster)
	v.validateMachines()
	if v.interrupted == nil {
		v.validateGroups()
		v.validateNodeRestriction()
		v.validateViaKubernetes() // viakubernetes.go
	}
}

func (v *validator) validateCluster(c *Cluster) {
	v.dns1123Label("cluster.name", c.Name)
	v.validateEndpoint("cluster.endpoint", c.Endpoint)
	talosOK := v.talosVersion("cluster.talosVersion", c.TalosVersion)
	if v.version("cluster.kubernetesVersion", c.KubernetesVersion) && talosOK {
		v.kubernetesSupported(c.TalosVersion, c.KubernetesVersion)
	}
	if strings.ContainsAny(c.InstallImage, " \t") || !strings.Contains(c.InstallImage, ":") && !strings.Contains(c.InstallImage, "@") {
		v.errorf("cluster.installImage", "%q is not an image reference with a tag or digest, e.g. %s", c.InstallImage, talos.DefaultInstallImage(c.TalosVersion))
	}

	v.validateSchematic("cluster.schematic", c.Schematic)
	v.validateSchematic("cluster.controlPlane.schematic", c.ControlPlane.Schematic)
	v.validateSchematic("cluster.workers.schematic", c.Workers.Schematic)
	if f := c.ImageFactory; f == "" || strings.ContainsAny(f, " \t/@") {
		v.errorf("cluster.imageFactory", "%q is not a registry host (and port), e.g. %s", f, DefaultImageFactory)
	}

	n := &c.Network
	if n.CNI != "none" && n.CNI != "flannel" {
		v.errorf("cluster.network.cni", "must be none or flannel, got %q", n.CNI)
	}
	var prefixes []namedPrefix
	prefixes = append(prefixes, v.cidrs("cluster.network.podSubnets", n.PodSubnets)...)
	prefixes = append(prefixes, v.cidrs("cluster.network.serviceSubnets", n.ServiceSubnets)...)
	for i := range prefixes {
		for j := i + 1; j < len(prefixes); j++ {
			if prefixes[i].p.Overlaps(prefixes[j].p) {
				v.errorf(prefixes[j].path, "%s overlaps %s (%s): pod and service subnets must not overlap", prefixes[j].p, prefixes[i].path, prefixes[i].p)
			}
		}
	}
	if len(validation.IsDNS1123Subdomain(n.DNSDomain)) > 0 {
		v.errorf("cluster.network.dnsDomain", "%q is not a DNS domain", n.DNSDomain)
	}

	cl := &c.Cilium
	if *cl.KubeProxyReplacement {
		if *n.KubeProxy {
			v.errorf("cluster.network.kubeProxy", "kube-proxy is enabled while cilium.kubeProxyReplacement is true: set kubeProxy: false (or kubeProxyReplacement: false)")
		}
		if n.CNI != "none" {
			v.errorf("cluster.cilium.kubeProxyReplacement", "Cilium replaces kube-proxy only as the CNI: set cluster.network.cni: none")
		}
	}
	if cl.K8sServicePort < 1 || cl.K8sServicePort > 65535 {
		v.errorf("cluster.cilium.k8sServicePort", "port %d out of range 1-65535", cl.K8sServicePort)
	}
	if cl.K8sServiceHost != "localhost" && !validHost(cl.K8sServiceHost) {
		v.errorf("cluster.cilium.k8sServiceHost", "%q is not a host name or IP address", cl.K8sServiceHost)
	}

	for i, d := range c.ReadableDirs {
		if !filepath.IsAbs(d) {
			v.errorf(fmt.Sprintf("cluster.readableDirs[%d]", i), "%q is not an absolute path: name the directory from the root, e.g. /etc/devata/talos", d)
		}
	}
	if c.Secrets != "" {
		if _, err := Confine(v.dir, c.ReadableDirs, c.Secrets); err != nil {
			v.errorf("cluster.secrets", "%v", err)
		}
	}
	v.patches("cluster.patches", c.Patches)
	v.patches("cluster.controlPlane.patches", c.ControlPlane.Patches)
	v.patches("cluster.workers.patches", c.Workers.Patches)
	v.validateWindows(c)
}

func (v *validator) validateMachines() {
	inv := v.inv
	if len(inv.Machines) == 0 {
		v.errorf("machines", "no machines: list at least one control-plane machine")
		return
	}
	names := map[string]string{}
	endpoints := map[string]string{}
	controlPlanes := 0
	for i := range inv.Machines {
		// one look per machine costs nanoseconds against the microseconds
		// a machine takes, and Ctrl-C stops a fleet of any size at once
		if v.ctx != nil && v.ctx.Err() != nil {
			v.interrupted = &InterruptedError{Doing: "validating " + v.d.file, Done: i, Total: len(inv.Machines), Cause: context.Cause(v.ctx)}
			return
		}
		m := &inv.Machines[i]
		p := fmt.Sprintf("machines[%d]", i)
		if v.dns1123Label(p+".name", m.Name) {
			if first, dup := names[m.Name]; dup {
				v.errorf(p+".name", "duplicate machine name %q (also %s)", m.Name, first)
			}
			names[m.Name] = p
		}
		switch m.Role {
		case RoleControlPlane:
			controlPlanes++
		case RoleWorker:
		case "":
			v.errorf(p+".role", "required: controlplane or worker")
		default:
			v.errorf(p+".role", "must be controlplane or worker, got %q", m.Role)
		}
		v.validateAddress(p, m)
		if m.Address != "" {
			if first, dup := endpoints[m.Endpoint()]; dup {
				v.errorf(p+".address", "address %s is already used by %s", m.Endpoint(), first)
			}
			endpoints[m.Endpoint()] = p
		}
		v.validateInstallDisk(p, m)
		v.patches(p+".patches", m.Patches)
		v.labelMap(p+".labels", m.Labels)
		v.taintMap(p+".taints", m.Taints)
		v.labelMap(p+".viaKubernetes.labels", m.ViaKubernetes.Labels)
		v.taintMap(p+".viaKubernetes.taints", m.ViaKubernetes.Taints)
		v.validateVolumes(p, m.Volumes)
		v.validateMounts(p, m)
		v.validateRawDisks(p, m.RawDisks)
		v.validateSchematic(p+".schematic", m.Schematic)
		v.validateHold(p, m)
	}
	switch {
	case controlPlanes == 0:
		v.errorf("machines", "no control-plane machine: give at least one machine role: controlplane")
	case controlPlanes%2 == 0:
		v.warnf("machines", "%d control planes: an even count tolerates no more etcd failures than %d; use an odd number", controlPlanes, controlPlanes-1)
	}
}

func (v *validator) validateAddress(p string, m *Machine) {
	switch {
	case m.Address == "":
		v.errorf(p+".address", "required: the machine's Talos API address (IP or DNS name)")
	case strings.Contains(m.Address, "://"):
		v.errorf(p+".address", "%q is a URL: give only the host, e.g. 10.20.0.11 or 10.20.0.11:50000", m.Address)
	default:
		if _, port, err := net.SplitHostPort(m.Address); err == nil {
			v.errorf(p+".address", "address carries port %s but port is %d: give the port once", port, m.Port)
		} else if !validHost(m.Address) {
			v.errorf(p+".address", "%q is neither an IP address nor a DNS name", m.Address)
		}
	}
	if m.Port < 1 || m.Port > 65535 {
		v.errorf(p+".port", "port %d out of range 1-65535", m.Port)
	}
}

func (v *validator) validateInstallDisk(p string, m *Machine) {
	switch {
	case m.InstallDisk != "" && m.InstallDiskSelector != nil:
		v.errorf(p+".installDiskSelector", "set installDisk or installDiskSelector, not both")
	case m.InstallDisk == "" && m.InstallDiskSelector == nil:
		v.errorf(p+".installDisk", "required: the disk Talos installs to (e.g. /dev/nvme0n1), or an installDiskSelector; devata never guesses a disk to wipe")
	case m.InstallDisk != "":
		if !strings.HasPrefix(m.InstallDisk, "/dev/") || strings.ContainsAny(m.InstallDisk, " \t") {
			v.errorf(p+".installDisk", "%q is not a device path under /dev/", m.InstallDisk)
		}
	default:
		if *m.InstallDiskSelector == (InstallDiskSelector{}) {
			v.errorf(p+".installDiskSelector", "empty selector would match any disk: set at least one of size, name, model, serial, modalias, uuid, wwid, type, busPath")
		}
		if size := m.InstallDiskSelector.Size; size != "" {
			var matcher v1alpha1.InstallDiskSizeMatcher
			if err := yaml.Unmarshal([]byte(strconv.Quote(size)), &matcher); err != nil {
				v.errorf(p+".installDiskSelector.size", "%q: %s; use e.g. '>= 500GB'", size, oneLine(strings.TrimPrefix(err.Error(), "yaml: ")))
			}
		}
		if name := m.InstallDiskSelector.Name; name != "" {
			// machinery v1alpha1_provider.go, InstallDiskSelector.Expression:
			// "selector on name is not supported", so the install fails
			v.errorf(p+".installDiskSelector.name", "Talos v1.11 cannot select the install disk by name; use installDisk: /dev/%s instead", strings.TrimPrefix(name, "/dev/"))
		}
		switch m.InstallDiskSelector.Type {
		case "", "ssd", "hdd", "nvme", "sd":
		default:
			v.errorf(p+".installDiskSelector.type", "must be ssd, hdd, nvme or sd, got %q", m.InstallDiskSelector.Type)
		}
	}
}

func (v *validator) dns1123Label(path, s string) bool {
	if s == "" {
		v.errorf(path, "required")
		return false
	}
	if len(validation.IsDNS1123Label(s)) > 0 {
		v.errorf(path, "%q is not a DNS-1123 label: use at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit", s)
		return false
	}
	return true
}

func (v *validator) version(path, s string) bool {
	if !versionRE.MatchString(s) {
		v.errorf(path, "%q is not a version of the form vX.Y.Z", s)
		return false
	}
	return true
}

// talosVersion checks that devata supports Talos version s (talos.Releases):
// a release of 1.11 to 1.14, or a pre-release of the next minor, which is
// accepted with a warning. It says whether the Kubernetes check can follow.
func (v *validator) talosVersion(path, s string) bool {
	m := talosVersionRE.FindStringSubmatch(s)
	if m == nil {
		v.errorf(path, "%q is not a Talos version of the form vX.Y.Z", s)
		return false
	}
	minor, _ := talos.Minor(s)
	switch {
	case m[1] != "1" || minor < talos.OldestMinor:
		v.errorf(path, "%s: devata supports Talos 1.%d to 1.%d; upgrade the cluster to 1.%d with talosctl first, then describe it here", s, talos.OldestMinor, talos.NewestMinor, talos.OldestMinor)
		return false
	case minor == talos.NewestMinor+1 && m[2] != "":
		v.warnf(path, "%s is a pre-release of Talos 1.%d, which devata does not support yet: it is spoken to as 1.%d, and its Kubernetes versions are not checked", s, minor, talos.NewestMinor)
		return false
	case minor > talos.NewestMinor:
		v.errorf(path, "%s: devata supports Talos 1.%d to 1.%d (and 1.%d pre-releases with a warning); a newer devata is needed for it", s, talos.OldestMinor, talos.NewestMinor, talos.NewestMinor+1)
		return false
	case m[2] != "":
		v.warnf(path, "%s is a pre-release; devata speaks to it as Talos 1.%d", s, minor)
	}
	if _, err := config.ParseContractFromVersion(s); err != nil {
		v.errorf(path, "not a Talos version machinery knows: %v", err)
		return false
	}
	return true
}

// kubernetesSupported refuses a Kubernetes version the cluster's Talos does
// not run: Talos' RuntimeValidate refuses such a config on apply
// (machinery v1alpha1_validation.go, ValidateKubernetesImageTag), so it is
// caught here before anything is sent.
func (v *validator) kubernetesSupported(talos, kube string) {
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
	if err != nil {
		return // the version check above already said what is wrong
	}
	kv, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kube, "v"))
	if err != nil {
		return
	}
	if err := kv.SupportedWith(tv); err != nil {
		v.errorf("cluster.kubernetesVersion", "%s: Talos %s refuses it on apply (%v); pick a Kubernetes version Talos %s supports (Talos' support matrix), or another cluster.talosVersion", kube, talos, err, talos)
	}
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// validateSchematic checks a schematic as Image Factory would take it:
// extensions named publisher/name, one kernel argument an entry.
func (v *validator) validateSchematic(path string, s *Schematic) {
	if s == nil {
		return
	}
	if v.inv.Cluster.installImageGiven {
		v.warnf(path, "cluster.installImage %s is given, so it is what machines install and upgrade with: this schematic is not used, and the extensions check cannot tell what that image carries: remove cluster.installImage to install from the schematic", v.inv.Cluster.InstallImage)
	}
	if o := s.Overlay; o != nil && (o.Image == "" || o.Name == "") {
		v.errorf(path+".overlay", "an overlay needs both its image and its name, e.g. {image: siderolabs/sbc-raspberrypi, name: rpi_generic}")
	}
	seen := map[string]bool{}
	for i, e := range s.Customization.SystemExtensions.OfficialExtensions {
		ep := fmt.Sprintf("%s.customization.systemExtensions.officialExtensions[%d]", path, i)
		pub, name, ok := strings.Cut(e, "/")
		switch {
		case !ok || pub == "" || name == "" || strings.ContainsAny(e, " \t:@"):
			v.errorf(ep, "%q is not an extension's name as Image Factory lists it (publisher/name, e.g. siderolabs/iscsi-tools)", e)
		case seen[ExtensionName(e)]:
			v.errorf(ep, "%s is listed twice", e)
		}
		seen[ExtensionName(e)] = true
	}
	for i, a := range s.Customization.ExtraKernelArgs {
		if a == "" || strings.ContainsAny(a, " \t\n") {
			v.errorf(fmt.Sprintf("%s.customization.extraKernelArgs[%d]", path, i), "%q: one kernel argument an entry, e.g. net.ifnames=0", a)
		}
	}
}
