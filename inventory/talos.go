package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// The Talos releases devata speaks to: the current stable one and the one
// before it (1.14 and 1.13 on 2026-12-05), 1.12, and 1.11 for clusters on
// their way up. A 1.15 pre-release is accepted with a warning; anything
// else is refused. docs/talos-versions.md is this table for people;
// TestSupportTable holds both to machinery's own constants.
const (
	OldestTalosMinor = 11
	NewestTalosMinor = 14
)

// TalosRelease is what devata relies on in one Talos 1.x release, read in
// that release's source.
type TalosRelease struct {
	Minor int
	// Kubernetes is the window of Kubernetes minors the release runs
	// (pkg/machinery/compatibility/talos1xx: six minors back), and
	// DefaultKubernetes what its generate defaults to (constants.go).
	Kubernetes        [2]string
	DefaultKubernetes string
	// LifecycleUpgrade: the release serves LifecycleService.Upgrade
	// (api/machine/lifecycle.proto, added in 1.13); before it only
	// MachineService.Upgrade.
	LifecycleUpgrade bool
	// LiveApply: every config change applies without a reboot (1.14
	// removed CanApplyImmediate; AUTO is always NO_REBOOT and REBOOT is
	// refused on a configured machine).
	LiveApply bool
	// DefaultInstaller is the installer repository its generate defaults to.
	DefaultInstaller string
}

// TalosReleases are the supported releases, oldest first.
var TalosReleases = []TalosRelease{
	{Minor: 11, Kubernetes: [2]string{"1.29", "1.34"}, DefaultKubernetes: "1.34.0", DefaultInstaller: installerImage},
	{Minor: 12, Kubernetes: [2]string{"1.30", "1.35"}, DefaultKubernetes: "1.35.0", DefaultInstaller: installerImage},
	{Minor: 13, Kubernetes: [2]string{"1.31", "1.36"}, DefaultKubernetes: "1.36.3", LifecycleUpgrade: true, DefaultInstaller: installerImage},
	{Minor: 14, Kubernetes: [2]string{"1.32", "1.37"}, DefaultKubernetes: "1.37.0", LifecycleUpgrade: true, LiveApply: true, DefaultInstaller: factoryInstaller},
}

// TalosReleaseOf is the release of Talos version v (vX.Y.Z), if supported.
func TalosReleaseOf(v string) (TalosRelease, bool) {
	minor, ok := talosMinor(v)
	if !ok {
		return TalosRelease{}, false
	}
	i := slices.IndexFunc(TalosReleases, func(r TalosRelease) bool { return r.Minor == minor })
	if i < 0 {
		return TalosRelease{}, false
	}
	return TalosReleases[i], true
}

// DocumentKinds are the machine config document kinds (besides v1alpha1)
// and the Talos 1.x minor that first registers each: a machine on an older
// Talos refuses a config holding one (configloader: `"Kind" "v1alpha1": not
// registered`). Read from each release's pkg/machinery/config/types/*
// registry.Register calls: 1.11.0 (or before), 1.12.4, 1.13.9, 1.14.1.
var DocumentKinds = map[string]int{
	// 1.11 and before
	"EthernetConfig": 11, "EventSinkConfig": 11, "ExistingVolumeConfig": 11, "ExtensionServiceConfig": 11,
	"KmsgLogConfig": 11, "KubeSpanEndpointsConfig": 11, "NetworkDefaultActionConfig": 11, "NetworkRuleConfig": 11,
	"PCIDriverRebindConfig": 11, "RawVolumeConfig": 11, "SideroLinkConfig": 11, "SwapVolumeConfig": 11,
	"TrustedRootsConfig": 11, "UserVolumeConfig": 11, "VolumeConfig": 11, "WatchdogTimerConfig": 11, "ZswapConfig": 11,
	// 1.12: the multi-document network configuration, registries
	"BondConfig": 12, "BridgeConfig": 12, "DHCPv4Config": 12, "DHCPv6Config": 12, "DummyLinkConfig": 12,
	"HCloudVIPConfig": 12, "HostnameConfig": 12, "Layer2VIPConfig": 12, "LinkAliasConfig": 12, "LinkConfig": 12,
	"OOMConfig": 12, "RegistryAuthConfig": 12, "RegistryMirrorConfig": 12, "RegistryTLSConfig": 12,
	"ResolverConfig": 12, "StaticHostConfig": 12, "TimeSyncConfig": 12, "VLANConfig": 12, "WireguardConfig": 12,
	// 1.13
	"BlackholeRouteConfig": 13, "EnvironmentConfig": 13, "ExternalVolumeConfig": 13, "ImageVerificationConfig": 13,
	"KubeSpanConfig": 13, "RoutingRuleConfig": 13, "TCPProbeConfig": 13, "VRFConfig": 13,
	// 1.14: what used to be v1alpha1 fields, Kubernetes above all
	"BGPInstanceConfig": 14, "CRIBaseRuntimeSpecConfig": 14, "CRICustomizationConfig": 14, "ContainerConfig": 14,
	"DiscoveryIdentityConfig": 14, "DiscoveryServiceConfig": 14, "EtcFileConfig": 14, "FilesystemScrubConfig": 14,
	"FilesystemTrimConfig": 14, "HTTPProbeConfig": 14, "ImageCacheConfig": 14, "KernelModuleConfig": 14,
	"KubeAPIServerCAConfig": 14, "KubeAPIServerConfig": 14, "KubeAdmissionControlConfig": 14, "KubeAggregatorCAConfig": 14,
	"KubeAuditPolicyConfig": 14, "KubeAuthenticationConfig": 14, "KubeAuthorizerConfig": 14, "KubeClusterConfig": 14,
	"KubeControllerManagerConfig": 14, "KubeCoreDNSConfig": 14, "KubeCredentialProviderConfig": 14, "KubeEtcdEncryptionConfig": 14,
	"KubeExternalManifestConfig": 14, "KubeFlannelCNIConfig": 14, "KubeInlineManifestConfig": 14, "KubeNetworkConfig": 14,
	"KubeNodeConfig": 14, "KubePrismConfig": 14, "KubeProxyConfig": 14, "KubeSchedulerConfig": 14,
	"KubeServiceAccountConfig": 14, "KubeStaticPodConfig": 14, "KubeTalosAPIAccessConfig": 14, "KubeletConfig": 14,
	"LVMLogicalVolumeConfig": 14, "LVMVolumeGroupConfig": 14, "RAIDArrayConfig": 14, "SecurityProfileConfig": 14,
	"SysctlConfig": 14, "SysfsConfig": 14, "UdevRulesConfig": 14, "UnattendedInstallConfig": 14, "VethConfig": 14,
}

// PatchDocument is one document of a patch file: its kind ("" for a
// v1alpha1 fragment) and the line it starts on.
type PatchDocument struct {
	Kind string
	Line int
}

// PatchDocuments lists the documents of a patch file, in order. It reads
// only each document's top-level kind; what does not parse as YAML is
// left to machinery's loader to report.
func PatchDocuments(data []byte) []PatchDocument {
	var out []PatchDocument
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) || err != nil {
			return out
		}
		doc := PatchDocument{Line: n.Line}
		if len(n.Content) == 1 && n.Content[0].Kind == yaml.MappingNode {
			m := n.Content[0]
			doc.Line = m.Line
			for i := 0; i+1 < len(m.Content); i += 2 {
				if m.Content[i].Value == "kind" {
					doc.Kind = m.Content[i+1].Value
				}
			}
		}
		out = append(out, doc)
	}
}

// NewerKindError is a patch document of a kind the contract's Talos does
// not know yet.
type NewerKindError struct {
	File  string
	Line  int
	Kind  string
	Since int // the Talos 1.x minor that introduced it
	Talos string
}

func (e *NewerKindError) Error() string {
	return fmt.Sprintf("%s:%d: document %s came with Talos 1.%d; Talos %s refuses a config holding it (%q %q: not registered): remove it, or write the setting as Talos %s does (a v1alpha1 field), or raise cluster.talosVersion once every machine runs 1.%d",
		e.File, e.Line, e.Kind, e.Since, e.Talos, e.Kind, "v1alpha1", e.Talos, e.Since)
}

// NewerKinds says, for the documents of one patch file that its Talos
// refuses, which they are and what to do.
func NewerKinds(errs []*NewerKindError) string {
	if len(errs) == 1 {
		return errs[0].Error()
	}
	e := errs[0]
	names := make([]string, len(errs))
	since := 0
	for i, x := range errs {
		names[i] = fmt.Sprintf("%s (line %d, Talos 1.%d)", x.Kind, x.Line, x.Since)
		since = max(since, x.Since)
	}
	return fmt.Sprintf("%s: %d documents came with a later Talos than %s, which refuses a config holding them (not registered): %s; remove them, or write the settings as Talos %s does (v1alpha1 fields), or raise cluster.talosVersion once every machine runs 1.%d",
		e.File, len(errs), e.Talos, strings.Join(names, ", "), e.Talos, since)
}

// CheckPatchKinds refuses each document of patch file (its data) that
// Talos version talos does not know.
func CheckPatchKinds(file string, data []byte, talos string) []*NewerKindError {
	minor, ok := talosMinor(talos)
	if !ok {
		return nil
	}
	var out []*NewerKindError
	for _, d := range PatchDocuments(data) {
		if since, known := DocumentKinds[d.Kind]; known && since > minor {
			out = append(out, &NewerKindError{File: file, Line: d.Line, Kind: d.Kind, Since: since, Talos: talos})
		}
	}
	return out
}
