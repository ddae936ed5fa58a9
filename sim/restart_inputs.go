package sim

import (
	"fmt"
	"net/netip"
	"net/url"
	"slices"

	"github.com/siderolabs/talos/pkg/machinery/config"
	talosconfig "github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/secrets"

	"devata.dev/devata/internal/configview"
)

// kubeletInputs is what KubeletServiceController (v1.14.1
// controllers/k8s/kubelet_service.go Run) restarts the kubelet on, derived
// from a config as machined's controllers derive it: the KubeletConfig
// (kubelet_config.go NewKubeletConfigController), the node name and node IP
// subnets KubeletSpecController (kubelet_spec.go) adds to it, and the
// kubelet secrets (controllers/secrets/kubelet.go NewKubeletController).
type kubeletInputs struct {
	config        k8s.KubeletConfigSpec
	nodename      string
	fqdn          bool
	nodeIPSubnets []string
	secrets       secrets.KubeletSpec
}

// kubeletInputsOf derives the kubelet's inputs from cfg. StaticPodListURL
// is left out (the node's own static pod server, the same across applies).
// KubeletSpecController renders ExtraArgs, ExtraConfig, ClusterDNS and
// RegisterWithTaints into arguments and a kubelet configuration, where
// empty and absent read the same; they are compared that way.
func kubeletInputsOf(cfg config.Provider) kubeletInputs {
	var in kubeletInputs

	kc := cfg.K8sKubeletConfig()
	if kc == nil {
		return in
	}

	c := &in.config
	c.Image = kc.Image()
	c.ClusterDNS = kc.ClusterDNS()

	if n := cfg.K8sNetworkConfig(); n != nil {
		if len(c.ClusterDNS) == 0 {
			for _, a := range k8s.DNSServiceAddrs(n.ServiceCIDRs()) {
				c.ClusterDNS = append(c.ClusterDNS, a.String())
			}
		}

		c.ClusterDomain = n.DNSDomain()
	}

	for k, v := range kc.ExtraArgs() {
		if c.ExtraArgs == nil {
			c.ExtraArgs = map[string]k8s.ArgValues{}
		}

		c.ExtraArgs[k] = k8s.ArgValues{Values: v}
	}

	c.ExtraMounts = kc.ExtraMounts()
	c.ExtraConfig = nilIfEmpty(kc.ExtraConfig())
	c.DefaultRuntimeSeccompEnabled = kc.DefaultRuntimeSeccompProfileEnabled()
	c.DisableManifestsDirectory = kc.DisableManifestsDirectory()

	c.CloudProviderExternal = externalCloud(cfg)

	if m := cfg.Machine(); m != nil {
		c.EnableFSQuotaMonitoring = m.Features().DiskQuotaSupportEnabled()
	}

	if node := cfg.K8sNodeConfig(); node != nil {
		c.SkipNodeRegistration = node.SkipNodeRegistration()
		c.RegisterWithTaints = nilIfEmpty(node.Taints())
		in.fqdn = node.RegisterWithFQDN()

		if ip := node.NodeIP(); ip != nil {
			in.nodeIPSubnets = ip.ValidSubnets()
		}
	}

	if cp := cfg.K8sCredentialProviderConfig(); cp != nil {
		c.CredentialProviderConfig = cp.Configuration()
	}

	in.nodename = configview.Hostname(cfg)
	in.secrets = kubeletSecretsOf(cfg)

	return in
}

// kubeletSecretsOf derives secrets.Kubelet as controllers/secrets/kubelet.go
// does: the API endpoint the kubelet talks to (KubePrism, the local API
// server on a control plane, the cluster endpoint on a worker), the CAs it
// accepts and the bootstrap token.
func kubeletSecretsOf(cfg config.Provider) secrets.KubeletSpec {
	var s secrets.KubeletSpec

	switch kp := cfg.K8sKubePrismConfig(); {
	case kp != nil:
		s.Endpoint = localURL("127.0.0.1", kp.Port())
		s.EndpointTLSServerName = kp.TLSServerName()
	case cfg.Machine() != nil && cfg.Machine().Type().IsControlPlane() && cfg.K8sAPIServerConfig() != nil:
		s.Endpoint = localURL("localhost", cfg.K8sAPIServerConfig().APIPort())
	case cfg.K8sClusterConfig() != nil:
		s.Endpoint = cfg.K8sClusterConfig().ClusterEndpoint()
	}

	if ca := cfg.K8sAPIServerCAConfig(); ca != nil {
		s.AcceptedCAs = ca.AcceptedCAs()
	}

	if cl := cfg.Cluster(); cl != nil && cl.Token() != nil {
		s.BootstrapTokenID, s.BootstrapTokenSecret = cl.Token().ID(), cl.Token().Secret()
	}

	return s
}

// staticPodInputs are what ControlPlaneStaticPodController (v1.14.1
// controllers/k8s/control_plane_static_pod.go) renders the control plane's
// static pods from: each pod's config resource (control_plane.go
// NewControlPlaneAPIServerController, …ControllerManager…, …Scheduler…),
// the files the API server reads, whose version ConfigStatus stamps on its
// pod (control_plane.go admission control, audit policy, authentication,
// authorization), and the Kubernetes secrets, whose version SecretsStatus
// stamps on all three (controllers/secrets/root.go NewRootKubernetesController).
type staticPodInputs struct {
	apiServer         k8s.APIServerConfigSpec
	apiServerFiles    apiServerFiles
	controllerManager k8s.ControllerManagerConfigSpec
	scheduler         k8s.SchedulerConfigSpec
	secrets           secrets.KubernetesRootSpec
}

// apiServerFiles are the configuration files the API server's pod mounts.
type apiServerFiles struct {
	admission      []k8s.AdmissionPluginSpec
	audit          map[string]any
	authentication map[string]any
	authorization  []k8s.AuthorizationAuthorizersSpec
}

// staticPodInputsOf derives the control plane's static pod inputs from cfg,
// or nil where Talos renders no static pods (controlplaneMapFunc and each
// controller's guards: the config lacks a part they read).
func staticPodInputsOf(cfg config.Provider) *staticPodInputs {
	api, cm, sched, net, cluster := cfg.K8sAPIServerConfig(), cfg.K8sControllerManagerConfig(), cfg.K8sSchedulerConfig(), cfg.K8sNetworkConfig(), cfg.K8sClusterConfig()
	if cfg.Cluster() == nil || cfg.Machine() == nil || api == nil || cm == nil || sched == nil || net == nil || cluster == nil {
		return nil
	}

	cloud := ""
	if externalCloud(cfg) {
		cloud = "external" // control_plane.go CloudProviderExternal
	}

	advertised := "$(POD_IP)"
	if node := cfg.K8sNodeConfig(); node != nil && node.SkipNodeRegistration() {
		advertised = ""
	}

	serviceCIDRs := prefixStrings(net.ServiceCIDRs())

	return &staticPodInputs{
		apiServer: k8s.APIServerConfigSpec{
			Image:                   api.Image(),
			CloudProvider:           cloud,
			ControlPlaneEndpoint:    cluster.ClusterEndpoint().String(),
			EtcdServers:             []string{"https://127.0.0.1:2379"},
			LocalPort:               api.APIPort(),
			ServiceCIDRs:            serviceCIDRs,
			ExtraArgs:               argValues(api.ExtraArgs()),
			ExtraVolumes:            extraVolumes(api.ExtraVolumes()),
			EnvironmentVariables:    api.Env(),
			AdvertisedAddress:       advertised,
			Resources:               podResources(api.Resources()),
			StartupProbesEnabled:    api.StartupProbesEnabled(),
			UseAuthenticationConfig: api.UseAuthenticationConfig(),
		},
		apiServerFiles: apiServerFilesOf(cfg),
		controllerManager: k8s.ControllerManagerConfigSpec{
			Enabled:              cm.Enabled(),
			Image:                cm.Image(),
			CloudProvider:        cloud,
			PodCIDRs:             prefixStrings(net.PodCIDRs()),
			ServiceCIDRs:         serviceCIDRs,
			ExtraArgs:            argValues(cm.ExtraArgs()),
			ExtraVolumes:         extraVolumes(cm.ExtraVolumes()),
			EnvironmentVariables: cm.Env(),
			Resources:            podResources(cm.Resources()),
			NodeCIDRMaskSizeIPv4: net.NodeCIDRMaskSizeIPv4(),
			NodeCIDRMaskSizeIPv6: net.NodeCIDRMaskSizeIPv6(),
		},
		scheduler: k8s.SchedulerConfigSpec{
			Enabled:              sched.Enabled(),
			Image:                sched.Image(),
			ExtraArgs:            argValues(sched.ExtraArgs()),
			ExtraVolumes:         extraVolumes(sched.ExtraVolumes()),
			EnvironmentVariables: sched.Env(),
			Resources:            podResources(sched.Resources()),
			Config:               sched.Config(),
		},
		secrets: kubernetesRootOf(cfg),
	}
}

// apiServerFilesOf derives the API server's configuration files as
// control_plane.go's admission control, audit policy, authentication and
// authorization controllers do (the authorizers with Node and RBAC first
// when the config injects them).
func apiServerFilesOf(cfg config.Provider) apiServerFiles {
	var f apiServerFiles

	for _, p := range cfg.K8sAdmissionControlPluginConfigs() {
		f.admission = append(f.admission, k8s.AdmissionPluginSpec{Name: p.Name(), Configuration: p.Configuration()})
	}

	if a := cfg.K8sAuditPolicyConfig(); a != nil {
		f.audit = a.Configuration()
	}

	if a := cfg.K8sAuthenticationConfig(); a != nil {
		f.authentication = a.Configuration()
	}

	authorizers := []k8s.AuthorizationAuthorizersSpec{}
	for _, a := range cfg.K8sAuthorizerConfigs() {
		authorizers = append(authorizers, k8s.AuthorizationAuthorizersSpec{Type: a.Type(), Name: a.Name(), Webhook: a.Webhook()})
	}

	if cfg.K8sAPIServerConfig().InjectDefaultAuthorizers() {
		has := func(typ string) bool {
			return slices.ContainsFunc(authorizers, func(a k8s.AuthorizationAuthorizersSpec) bool { return a.Type == typ })
		}

		if !has("Node") {
			authorizers = slices.Insert(authorizers, 0, k8s.AuthorizationAuthorizersSpec{Type: "Node", Name: "node"})
		}

		if !has("RBAC") {
			authorizers = slices.Insert(authorizers, 1, k8s.AuthorizationAuthorizersSpec{Type: "RBAC", Name: "rbac"})
		}
	}

	f.authorization = authorizers

	return f
}

// kubernetesRootOf derives secrets.KubernetesRoot as controllers/secrets/
// root.go NewRootKubernetesController does.
func kubernetesRootOf(cfg config.Provider) secrets.KubernetesRootSpec {
	var s secrets.KubernetesRootSpec

	if kp := cfg.K8sKubePrismConfig(); kp != nil {
		s.LocalEndpoint = localURL("127.0.0.1", kp.Port())
	} else {
		s.LocalEndpoint = localURL("localhost", cfg.K8sAPIServerConfig().APIPort())
	}

	s.Name = cfg.K8sClusterConfig().ClusterName()
	s.Endpoint = cfg.K8sClusterConfig().ClusterEndpoint()
	s.CertSANs = cfg.K8sAPIServerConfig().CertSANs()

	if n := cfg.K8sNetworkConfig(); n != nil {
		s.DNSDomain = n.DNSDomain()
		s.APIServerIPs = k8s.APIServerServiceAddrs(n.ServiceCIDRs())
	}

	if ca := cfg.K8sAggregatorCAConfig(); ca != nil {
		s.AggregatorCA, s.AcceptedAggregatorCAs = ca.IssuingCA(), ca.AcceptedCAs()
	}

	if ca := cfg.K8sAPIServerCAConfig(); ca != nil {
		s.IssuingCA, s.AcceptedCAs = ca.IssuingCA(), ca.AcceptedCAs()
	}

	if sa := cfg.K8sServiceAccountConfig(); sa != nil {
		s.ServiceAccount, s.ServiceAccountAcceptedKeys = sa.IssuingKey(), sa.AcceptedKeys()
		s.IssuerURL, s.AcceptedIssuers, s.APIAudiences = sa.IssuerURL(), sa.AcceptedIssuers(), sa.APIAudiences()
	}

	cl := cfg.Cluster()
	s.AESCBCEncryptionSecret, s.SecretboxEncryptionSecret = cl.AESCBCEncryptionSecret(), cl.SecretboxEncryptionSecret()

	if cl.Token() != nil {
		s.BootstrapTokenID, s.BootstrapTokenSecret = cl.Token().ID(), cl.Token().Secret()
	}

	if e := cfg.K8sEtcdEncryptionConfig(); e != nil {
		s.EtcdEncryptionConfig = e.EtcdEncryptionConfig()
	}

	return s
}

// argValues is control_plane.go's extraArgs map, made even when empty.
func argValues(args map[string][]string) map[string]k8s.ArgValues {
	out := make(map[string]k8s.ArgValues, len(args))
	for k, v := range args {
		out[k] = k8s.ArgValues{Values: v}
	}

	return out
}

// extraVolumes is control_plane.go convertVolumes.
func extraVolumes(vs []talosconfig.VolumeMount) []k8s.ExtraVolume {
	out := make([]k8s.ExtraVolume, 0, len(vs))
	for _, v := range vs {
		out = append(out, k8s.ExtraVolume{Name: v.Name(), HostPath: v.HostPath(), MountPath: v.MountPath(), ReadOnly: v.ReadOnly()})
	}

	return out
}

// podResources is control_plane.go convertResources.
func podResources(r talosconfig.Resources) k8s.Resources {
	var limits map[string]string

	if cpu, mem := r.CPULimits(), r.MemoryLimits(); cpu != "" || mem != "" {
		limits = map[string]string{}

		if cpu != "" {
			limits["cpu"] = cpu
		}

		if mem != "" {
			limits["memory"] = mem
		}
	}

	return k8s.Resources{Requests: map[string]string{"cpu": r.CPURequests(), "memory": r.MemoryRequests()}, Limits: limits}
}

// externalCloud: cluster.externalCloudProvider is enabled.
func externalCloud(cfg config.Provider) bool {
	cl := cfg.Cluster()
	if cl == nil {
		return false
	}

	ecp := cl.ExternalCloudProvider()

	return ecp != nil && ecp.Enabled()
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}

	return out
}

func localURL(host string, port int) *url.URL {
	return &url.URL{Scheme: "https", Host: fmt.Sprintf("%s:%d", host, port)}
}

// nilIfEmpty: KubeletSpecController renders an empty map as an absent one.
func nilIfEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if len(m) == 0 {
		return nil
	}

	return m
}
