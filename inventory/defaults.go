package inventory

import (
	"net"
	"strconv"
	"strings"
)

// Defaults applied to an inventory. They are part of the v1alpha1 contract:
// changing one changes what every inventory that omits the field renders to.
const (
	DefaultTalosVersion      = "v1.11.0"
	DefaultKubernetesVersion = "v1.34.1"
	DefaultSecrets           = "secrets.yaml"
	DefaultCNI               = "none"
	DefaultPodSubnet         = "10.244.0.0/16"
	DefaultServiceSubnet     = "10.96.0.0/12"
	DefaultDNSDomain         = "cluster.local"
	DefaultK8sServiceHost    = "localhost"
	DefaultK8sServicePort    = 7445
	DefaultTalosAPIPort      = 50000
	DefaultFilesystem        = "xfs"
	installerImage           = "ghcr.io/siderolabs/installer"
	// factoryInstaller is Talos 1.14's default installer (talos v1.14.1
	// pkg/images: InstallerImage("metal"), Factory factory.talos.dev), of the
	// empty schematic (DefaultInstallerImageSchematic): Talos stopped
	// publishing ghcr.io/siderolabs/installer with 1.14 (talos #13138).
	factoryInstaller      = "factory.talos.dev/metal-installer"
	emptySchematicID      = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	firstFactoryInstaller = 14 // the Talos 1.x minor from which the factory installer is the default
)

// DefaultInstallImage is the installer a machine of talosVersion installs
// and upgrades with when cluster.installImage is not given: up to Talos
// 1.13 the ghcr.io installer Talos published then, from 1.14 on the Image
// Factory's installer of the empty schematic, as Talos' own default.
func DefaultInstallImage(talosVersion string) string {
	if minor, ok := talosMinor(talosVersion); ok && minor >= firstFactoryInstaller {
		return factoryInstaller + "/" + emptySchematicID + ":" + talosVersion
	}
	return installerImage + ":" + talosVersion
}

// talosMinor is the minor version of a Talos 1.x version vX.Y.Z.
func talosMinor(v string) (int, bool) {
	major, rest, ok := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	if !ok || major != "1" {
		return 0, false
	}
	minor, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(minor)
	return n, err == nil
}

// Default fills every omitted field with its default, so the object is canonical.
// It never overwrites what the user wrote. Address ports are split into Port.
func Default(inv *Inventory) {
	c := &inv.Cluster
	setDefault(&c.TalosVersion, DefaultTalosVersion)
	setDefault(&c.KubernetesVersion, DefaultKubernetesVersion)
	setDefault(&c.InstallImage, DefaultInstallImage(c.TalosVersion))
	setDefault(&c.Secrets, DefaultSecrets)
	setDefault(&c.Network.CNI, DefaultCNI)
	setDefault(&c.Network.DNSDomain, DefaultDNSDomain)
	if c.Network.KubeProxy == nil {
		c.Network.KubeProxy = ptr(false)
	}
	if len(c.Network.PodSubnets) == 0 {
		c.Network.PodSubnets = []string{DefaultPodSubnet}
	}
	if len(c.Network.ServiceSubnets) == 0 {
		c.Network.ServiceSubnets = []string{DefaultServiceSubnet}
	}
	if c.Cilium.KubeProxyReplacement == nil {
		// Cilium replaces kube-proxy only where it is the CNI and kube-proxy is off.
		c.Cilium.KubeProxyReplacement = ptr(c.Network.CNI == "none" && !*c.Network.KubeProxy)
	}
	setDefault(&c.Cilium.K8sServiceHost, DefaultK8sServiceHost)
	if c.Cilium.K8sServicePort == 0 {
		c.Cilium.K8sServicePort = DefaultK8sServicePort
	}
	for i := range inv.Machines {
		m := &inv.Machines[i]
		if host, port, err := net.SplitHostPort(m.Address); err == nil {
			if p, err := strconv.Atoi(port); err == nil && (m.Port == 0 || m.Port == p) {
				m.Address, m.Port = host, p
			}
		}
		if m.Port == 0 {
			m.Port = DefaultTalosAPIPort
		}
		for j := range m.Volumes {
			setDefault(&m.Volumes[j].Filesystem, DefaultFilesystem)
		}
		for j := range m.Mounts {
			if m.Mounts[j].ReadWrite == nil {
				m.Mounts[j].ReadWrite = ptr(true)
			}
		}
		for j := range m.RawDisks {
			if m.RawDisks[j].MinCount == 0 {
				m.RawDisks[j].MinCount = 1
			}
		}
	}
}

func setDefault(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func ptr[T any](v T) *T { return &v }

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}
