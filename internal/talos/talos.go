// Package talos holds what devata relies on in each Talos release it
// supports, read in that release's source: the Kubernetes window, the
// upgrade RPC, how config changes apply, the default installer and the
// config document kinds. inventory validates against it and the simulated
// fleet plays it; it imports nothing of devata's.
package talos

import (
	"slices"
	"strconv"
	"strings"
)

// The Talos releases devata speaks to: the current stable one and the one
// before it (1.14 and 1.13 on 2026-12-05), 1.12, and 1.11 for clusters on
// their way up. A 1.15 pre-release is accepted with a warning; anything
// else is refused. docs/talos-versions.md is this table for people;
// TestSupportTable holds both to machinery's own constants.
const (
	OldestMinor = 11
	NewestMinor = 14
)

// Release is what devata relies on in one Talos 1.x release, read in
// that release's source.
type Release struct {
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
	// Latest is the release's newest patch the Go module proxy served on
	// 2026-12-05: an upgrade across several minors stops on it for each
	// minor in between.
	Latest string
}

// Releases are the supported releases, oldest first.
var Releases = []Release{
	{Minor: 11, Kubernetes: [2]string{"1.29", "1.34"}, DefaultKubernetes: "1.34.0", DefaultInstaller: GHCRInstaller, Latest: "v1.11.5"},
	{Minor: 12, Kubernetes: [2]string{"1.30", "1.35"}, DefaultKubernetes: "1.35.0", DefaultInstaller: GHCRInstaller, Latest: "v1.12.4"},
	{Minor: 13, Kubernetes: [2]string{"1.31", "1.36"}, DefaultKubernetes: "1.36.3", LifecycleUpgrade: true, DefaultInstaller: GHCRInstaller, Latest: "v1.13.9"},
	{Minor: 14, Kubernetes: [2]string{"1.32", "1.37"}, DefaultKubernetes: "1.37.0", LifecycleUpgrade: true, LiveApply: true, DefaultInstaller: FactoryInstaller, Latest: "v1.14.1"},
}

// ReleaseOf is the release of Talos version v (vX.Y.Z), if supported.
func ReleaseOf(v string) (Release, bool) {
	minor, ok := Minor(v)
	if !ok {
		return Release{}, false
	}
	i := slices.IndexFunc(Releases, func(r Release) bool { return r.Minor == minor })
	if i < 0 {
		return Release{}, false
	}
	return Releases[i], true
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

// Installers: Talos published ghcr.io/siderolabs/installer up to 1.13;
// 1.14's default is Image Factory's metal installer (talos v1.14.1
// pkg/images: InstallerImage("metal"), Factory factory.talos.dev) of the
// empty schematic (DefaultInstallerImageSchematic); ghcr.io has no 1.14
// (talos #13138).
const (
	GHCRInstaller    = "ghcr.io/siderolabs/installer"
	FactoryInstaller = "factory.talos.dev/metal-installer"
	EmptySchematicID = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
)

// DefaultInstallImage is the installer a machine of version v installs and
// upgrades with unless told otherwise: up to Talos 1.13 the ghcr.io
// installer Talos published then, from 1.14 on the Image Factory's
// installer of the empty schematic, as Talos' own default.
func DefaultInstallImage(v string) string {
	if minor, ok := Minor(v); ok && minor >= 14 {
		return FactoryInstaller + "/" + EmptySchematicID + ":" + v
	}
	return GHCRInstaller + ":" + v
}

// Minor is the minor version of a Talos 1.x version (vX.Y.Z, or a
// pre-release of it).
func Minor(v string) (int, bool) {
	major, rest, ok := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	if !ok || major != "1" {
		return 0, false
	}
	minor, _, _ := strings.Cut(rest, ".")
	n, err := strconv.Atoi(minor)
	return n, err == nil
}
