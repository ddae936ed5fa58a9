package render

import (
	"fmt"
	"maps"
	"slices"

	"github.com/siderolabs/go-pointer"
	coreconfig "github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/types/k8s"
	"github.com/siderolabs/talos/pkg/machinery/config/types/network"
	"github.com/siderolabs/talos/pkg/machinery/config/types/runtime"
	"github.com/siderolabs/talos/pkg/machinery/config/types/v1alpha1"

	"devata.dev/devata/inventory"
)

// Where a config contract keeps what devata declares (machinery v1.14.1
// config/contract.go and generate/init.go, worker.go, kubernetes.go):
//
//   - up to Talos 1.11 everything is a v1alpha1 field;
//   - from 1.12 (MultidocNetworkConfigSupported) generate emits a
//     HostnameConfig document (auto: stable), and a v1alpha1
//     machine.network.hostname beside it is refused ("static hostname is
//     already set in v1alpha1 config"): the hostname goes into that document;
//   - from 1.14 (MultidocKubernetesConfigSupported) the Kubernetes settings
//     are documents of their own: no CNI is a config without a
//     KubeFlannelCNIConfig document (talos control_plane.go sets NoneCNI
//     when K8sFlannelCNIConfig is nil); kube-proxy is off by a
//     KubeProxyConfig with enabled: false (deleting the document falls back
//     to v1alpha1's default, which is on); node labels live in
//     KubeNodeConfig; the install is an UnattendedInstallConfig (generate
//     emits none without an install disk, and without one Talos installs
//     nothing). Kubelet extraMounts have no document form
//     (KubeletConfigV1Alpha1.ExtraMounts is nil): a machine that needs them
//     keeps machine.kubelet in v1alpha1 instead of a KubeletConfig document,
//     which Talos 1.14 accepts and its validation checks.

// hostnameDocument says whether the contract's hostname is a HostnameConfig.
func hostnameDocument(c *coreconfig.VersionContract) bool {
	return c.MultidocNetworkConfigSupported()
}

// kubernetesDocuments says whether the contract's Kubernetes settings are documents.
func kubernetesDocuments(c *coreconfig.VersionContract) bool {
	return c.MultidocKubernetesConfigSupported()
}

// declareNetwork sets the inventory's CNI and kube-proxy choice on a
// generated role base, where the contract keeps them.
func declareNetwork(cfg coreconfig.Provider, c *inventory.Cluster, contract *coreconfig.VersionContract) (coreconfig.Provider, error) {
	if !kubernetesDocuments(contract) {
		return cfg.PatchV1Alpha1(func(cfg *v1alpha1.Config) error {
			proxy := &v1alpha1.ProxyConfig{Disabled: pointer.To(!*c.Network.KubeProxy)}   //nolint:staticcheck // the field Talos up to 1.13 reads
			if old := cfg.ClusterConfig.ProxyConfig; old != nil && *c.Network.KubeProxy { //nolint:staticcheck // idem
				// generate's image for cluster.kubernetesVersion: without it Talos runs
				// its own default version's kube-proxy (v1alpha1_proxyconfig.go Image)
				proxy.ContainerImage = old.ContainerImage
			}
			cfg.ClusterConfig.ProxyConfig = proxy //nolint:staticcheck // idem
			if cfg.ClusterConfig.ClusterNetwork != nil {
				cfg.ClusterConfig.ClusterNetwork.CNI = &v1alpha1.CNIConfig{CNIName: c.Network.CNI} //nolint:staticcheck // idem
			}
			return nil
		})
	}
	docs := make([]config.Document, 0, len(cfg.Documents()))
	for _, d := range cfg.Documents() {
		switch d := d.(type) {
		case *k8s.KubeFlannelCNIConfigV1Alpha1:
			if c.Network.CNI != "flannel" {
				continue // no CNI document: Talos deploys none
			}
		case *k8s.KubeProxyConfigV1Alpha1:
			p := d.DeepCopy()
			p.ProxyEnabled = pointer.To(*c.Network.KubeProxy)
			docs = append(docs, p)
			continue
		}
		docs = append(docs, d)
	}
	return container.New(docs...)
}

// declareMachine sets a machine's own fields (hostname, install, labels,
// kubelet mounts) on its role's base, where the contract keeps each, and
// adds its user volumes.
func (r *Renderer) declareMachine(base coreconfig.Provider, m *inventory.Machine) (coreconfig.Provider, error) {
	contract := r.contract
	raw := base.RawV1Alpha1().DeepCopy()
	if err := applyMachineFields(raw, m, contract, r.inv.MachineInstallImage(m)); err != nil {
		return nil, err
	}
	var kubeletImage string
	docs := []config.Document{raw}
	for _, d := range base.Documents() {
		switch d := d.(type) {
		case *v1alpha1.Config:
			continue // raw, above
		case *network.HostnameConfigV1Alpha1:
			h := d.DeepCopy()
			h.ConfigAuto, h.ConfigHostname = nil, m.Name // auto and hostname cannot both be set
			docs = append(docs, h)
			continue
		case *k8s.KubeNodeConfigV1Alpha1:
			// labels and taints (machinery v1.14.1 types/k8s/node.go:
			// LabelsConfig, TaintsConfig) of the machine and its groups
			if labels, taints := m.NodeLabels(), m.NodeTaints(); len(labels) > 0 || len(taints) > 0 {
				n := d.DeepCopy()
				n.LabelsConfig = withAll(n.LabelsConfig, labels)
				n.TaintsConfig = withAll(n.TaintsConfig, taints)
				docs = append(docs, n)
				continue
			}
		case *k8s.KubeletConfigV1Alpha1:
			if kubeletMounts(m) {
				kubeletImage = d.KubeletImage
				continue // machine.kubelet carries the mounts instead
			}
		}
		docs = append(docs, d)
	}
	if hostnameDocument(contract) && !slices.ContainsFunc(docs, func(d config.Document) bool { _, ok := d.(*network.HostnameConfigV1Alpha1); return ok }) {
		h := network.NewHostnameConfigV1Alpha1()
		h.ConfigHostname = m.Name
		docs = append(docs, h)
	}
	if kubernetesDocuments(contract) {
		install, err := r.unattendedInstall(m)
		if err != nil {
			return nil, err
		}
		docs = append(docs, install)
		if kubeletImage != "" {
			raw.MachineConfig.MachineKubelet.KubeletImage = kubeletImage                                   //nolint:staticcheck // no document form for extraMounts
			raw.MachineConfig.MachineKubelet.KubeletDefaultRuntimeSeccompProfileEnabled = pointer.To(true) //nolint:staticcheck // as generate sets it
			raw.MachineConfig.MachineKubelet.KubeletDisableManifestsDirectory = pointer.To(true)           //nolint:staticcheck // the document form forces it
		}
	}
	for _, vol := range m.Volumes {
		doc, err := userVolume(vol)
		if err != nil {
			return nil, fmt.Errorf("volume %s: %w", vol.Name, err)
		}
		docs = append(docs, doc)
	}
	return container.New(docs...)
}

// withAll is base with add over it, a copy; base when add is empty.
func withAll(base, add map[string]string) map[string]string {
	if len(add) == 0 {
		return base
	}
	out := make(map[string]string, len(base)+len(add))
	maps.Copy(out, base)
	maps.Copy(out, add)
	return out
}

func kubeletMounts(m *inventory.Machine) bool {
	return slices.ContainsFunc(m.Volumes, func(v inventory.Volume) bool { return v.KubeletMount != "" })
}

// unattendedInstall is the machine's install as Talos 1.14 reads it: the
// cluster's installer, and its disk as a CEL match (a device path as
// generate's unattendedInstallConfig writes it; a selector as machinery's
// InstallConfig.DiskMatchExpression converts one), never wiping.
func (r *Renderer) unattendedInstall(m *inventory.Machine) (*runtime.UnattendedInstallConfigV1Alpha1, error) {
	doc := runtime.NewUnattendedInstallConfigV1Alpha1()
	doc.Installer.Image = r.inv.MachineInstallImage(m)
	doc.ProvisioningSpec.Wipe = pointer.To(false)
	legacy := &v1alpha1.InstallConfig{}
	if err := setInstallDisk(legacy, m); err != nil {
		return nil, err
	}
	if legacy.InstallDisk != "" {
		if err := doc.ProvisioningSpec.DiskSelector.Match.UnmarshalText(fmt.Appendf(nil, "disk.dev_path == %q", legacy.InstallDisk)); err != nil {
			return nil, fmt.Errorf("installDisk: %w", err)
		}
		return doc, nil
	}
	expr, err := legacy.DiskMatchExpression()
	if err != nil {
		return nil, fmt.Errorf("installDiskSelector: %w (Talos %s's UnattendedInstallConfig matches disks by CEL: use model, serial, wwid, uuid, modalias, size or type)", err, r.contract)
	}
	if expr != nil {
		doc.ProvisioningSpec.DiskSelector.Match = *expr
	}
	return doc, nil
}
