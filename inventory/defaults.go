package inventory

import (
	"net"
	"strconv"

	"devata.dev/devata/internal/talos"
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
)

// Default fills every omitted field with its default, so the object is canonical.
// It never overwrites what the user wrote. Address ports are split into Port.
func Default(inv *Inventory) {
	c := &inv.Cluster
	setDefault(&c.TalosVersion, DefaultTalosVersion)
	setDefault(&c.KubernetesVersion, DefaultKubernetesVersion)
	c.installImageGiven = c.InstallImage != ""
	setDefault(&c.InstallImage, talos.DefaultInstallImage(c.TalosVersion))
	setDefault(&c.ImageFactory, DefaultImageFactory)
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
