// Package configview reads what a Talos machine config declares the same
// way whichever version contract wrote it, for devata and its simulated
// Talos alike; it imports nothing of devata's.
package configview

import (
	"slices"

	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
)

// What a machine config declares, read the same way whichever version
// contract wrote it: up to Talos 1.13 these are v1alpha1 fields, from 1.14
// on (MultidocKubernetesConfigSupported) the Kubernetes ones are documents
// of their own (KubeletConfig, KubeProxyConfig, KubeFlannelCNIConfig, …)
// and from 1.12 the hostname may be a HostnameConfig. machinery's
// container answers each K8s*/Network* accessor from the document when
// there is one and from the v1alpha1 fields otherwise.

// Hostname is the hostname the config sets ("" when it leaves it to
// Talos).
func Hostname(c config.Config) string {
	if h := c.NetworkHostnameConfig(); h != nil {
		return h.Hostname()
	}
	return ""
}

// CNI is the CNI Talos deploys by the config: "flannel", "custom"
// (manifests from URLs), or "none" (the operator installs one, Cilium).
// A v1alpha1 cluster.network.cni names it; a Talos 1.14 config deploys
// Flannel when it has a KubeFlannelCNIConfig document, a custom CNI as the
// KubeExternalManifestConfig "custom-cni" (generate's kubernetes.go), and
// none otherwise.
func CNI(c coreconfig.Provider) string {
	if c.K8sFlannelCNIConfig() != nil {
		return constants.FlannelCNI
	}
	if raw := c.RawV1Alpha1(); raw != nil && raw.ClusterConfig != nil && raw.ClusterConfig.ClusterNetwork != nil && raw.ClusterConfig.ClusterNetwork.CNI != nil { //nolint:staticcheck // legacy configuration is what Talos up to 1.13 reads
		return raw.ClusterConfig.ClusterNetwork.CNI.CNIName //nolint:staticcheck // idem
	}
	if slices.ContainsFunc(c.K8sExternalManifestConfigs(), func(m config.K8sExternalManifestConfig) bool { return m.Name() == "custom-cni" }) {
		return constants.CustomCNI
	}
	return constants.NoneCNI
}

// KubeProxy says whether Talos deploys kube-proxy by the config
// (control planes apply the manifest; a worker's config reads enabled).
func KubeProxy(c config.Config) bool {
	p := c.K8sProxyConfig()
	return p != nil && p.Enabled()
}

// InstallImage is the installer the config installs and upgrades with:
// Talos 1.14's UnattendedInstallConfig or machine.install.image.
func InstallImage(c config.Config) string {
	if u := c.UnattendedInstallConfig(); u != nil {
		return u.InstallerImage()
	}
	if c.Machine() != nil {
		return c.Machine().Install().Image()
	}
	return ""
}

// InstallDisk is the disk the config installs to: machine.install.disk,
// or Talos 1.14's UnattendedInstallConfig CEL match as written
// (disk.dev_path == "/dev/sda" for a disk path).
func InstallDisk(c config.Config) string {
	if u := c.UnattendedInstallConfig(); u != nil {
		return u.VolumeSelector().String()
	}
	if c.Machine() != nil {
		return c.Machine().Install().Disk()
	}
	return ""
}
