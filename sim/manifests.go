package sim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"devata.dev/devata/internal/configview"
	"devata.dev/devata/internal/talos"
)

// The bootstrap manifests a control plane renders from its config, as
// Talos v1.14.1 does: ControlPlaneBootstrapManifestsController
// (internal/app/machined/pkg/controllers/k8s/control_plane.go) turns the
// config into BootstrapManifestsConfig, and ManifestController
// (controllers/k8s/manifest.go render) renders the templates of
// controllers/k8s/internal/k8stemplates into Manifest resources in the
// controlplane namespace (type Manifests.kubernetes.talos.dev), one per
// name, each a list of objects converted to unstructured without status
// (adapters/k8s/manifest.go SetObjects). talosctl upgrade-k8s reads them
// (go-kubernetes v0.2.41 kubernetes/manifests GetBootstrapManifests) and
// applies them with server-side apply; ManifestApplyController
// (manifest_apply.go) creates, at boot, each object that does not exist,
// and leaves existing ones alone.
//
// The sim renders every manifest Talos renders: CoreDNS (11-core-dns:
// ServiceAccount, ClusterRole, ClusterRoleBinding, ConfigMap, Deployment;
// 11-core-dns-svc: the kube-dns Service, coredns.go) and kube-proxy when
// enabled (10-kube-proxy: DaemonSet, ServiceAccount, ClusterRoleBinding,
// kube-proxy.go, with the flags manageProxyConfigArgs gives in its
// command-line mode) here; the bootstrap token, the CSR bindings,
// kubeconfig-in-cluster, the node RBAC, flannel, the Talos ServiceAccount
// CRD and inline manifests in manifests_bootstrap.go. Approximations:
// extra manifests (URLs Talos downloads) are not served; kube-proxy's
// extra args and config-file mode and CoreDNS's and kube-proxy's resource
// overrides are not rendered.

// Manifest names, as manifest.go renders them.
const (
	manifestCoreDNS    = "11-core-dns"
	manifestCoreDNSSvc = "11-core-dns-svc"
	manifestKubeProxy  = "10-kube-proxy"
)

// renderedManifest is one Manifest resource's objects.
type renderedManifest struct {
	name string
	objs []kruntime.Object
}

// coreDNSDefaults is each Talos release's default CoreDNS version
// (pkg/machinery/constants DefaultCoreDNSVersion in v1.11.0, v1.12.4,
// v1.13.9, v1.14.1): a config that names no image runs the default of the
// Talos the machine runs (v1alpha1_provider.go CoreDNS.Image), not the
// one the sim was built with.
var coreDNSDefaults = map[int]string{11: "v1.12.2", 12: "v1.13.2", 13: "v1.14.6", 14: "v1.14.7"}

// coreDNSImage is the image the machine's Talos gives CoreDNS.
func coreDNSImage(s snapshot, configured string) string {
	built := constants.CoreDNSImage + ":" + constants.DefaultCoreDNSVersion
	if configured != built {
		return configured // named in the config
	}
	if minor, ok := talos.Minor(s.version); ok && coreDNSDefaults[minor] != "" {
		v := coreDNSDefaults[minor]
		return constants.CoreDNSImage + ":" + v
	}

	return configured
}

// renderManifests renders the bootstrap manifests of a configured control
// plane; nil on a worker or a config without a cluster.
func renderManifests(s snapshot) []renderedManifest {
	if !s.configured() || !s.controlPlane() || s.active.Cluster() == nil || s.active.K8sNetworkConfig() == nil {
		return nil
	}

	net := s.active.K8sNetworkConfig()

	out := bootstrapRBACManifests(s) // manifests_bootstrap.go

	if dns := s.active.K8sCoreDNSConfig(); dns != nil && dns.Enabled() {
		var v4, v6 string

		for _, ip := range k8s.DNSServiceAddrs(net.ServiceCIDRs()) {
			if v4 == "" && ip.Is4() {
				v4 = ip.String()
			}

			if v6 == "" && ip.Is6() {
				v6 = ip.String()
			}
		}

		out = append(out,
			renderedManifest{manifestCoreDNS, []kruntime.Object{
				coreDNSServiceAccount(), coreDNSClusterRole(), coreDNSClusterRoleBinding(),
				coreDNSConfigMap(net.DNSDomain()), coreDNSDeployment(coreDNSImage(s, dns.Image())),
			}},
			renderedManifest{manifestCoreDNSSvc, []kruntime.Object{coreDNSService(v4, v6)}},
		)
	}

	if configview.KubeProxy(s.active) {
		if p := s.active.K8sProxyConfig(); p != nil {
			var cidrs []string
			for _, c := range net.PodCIDRs() {
				cidrs = append(cidrs, c.String())
			}

			out = append(out, renderedManifest{manifestKubeProxy, []kruntime.Object{
				kubeProxyDaemonSet(p.Image(), strings.Join(cidrs, ","), cmp.Or(p.Mode(), "nftables")),
				kubeProxyServiceAccount(), kubeProxyClusterRoleBinding(),
			}})
		}
	}

	out = append(out, optionalManifests(s)...)

	slices.SortFunc(out, func(a, b renderedManifest) int { return cmp.Compare(a.name, b.name) })

	return out
}

// manifestsOf names the manifests ManifestApplyController applied: every
// Manifest resource's (manifest_apply.go Run writes ManifestStatus with
// the ids it applied).
func manifestsOf(s snapshot) []string {
	var names []string
	for _, rm := range renderManifests(s) {
		names = append(names, rm.name)
	}

	return names
}

// manifestResources are the control plane's Manifest resources.
func manifestResources(s snapshot) []resource.Resource {
	var out []resource.Resource

	for _, rm := range renderManifests(s) {
		r := k8s.NewManifest(k8s.ControlPlaneNamespaceName, rm.name)

		for _, obj := range rm.objs {
			u, err := toUnstructured(obj)
			if err != nil {
				continue // the sim's own objects always convert
			}

			r.TypedSpec().Items = append(r.TypedSpec().Items, k8s.SingleManifest{Object: u.Object})
		}

		out = append(out, r)
	}

	return out
}

// toUnstructured converts as SetObjects does: the object's kind kept, its
// status dropped.
func toUnstructured(obj kruntime.Object) (*unstructured.Unstructured, error) {
	m, err := kruntime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %T: %w", obj, err)
	}

	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(obj.GetObjectKind().GroupVersionKind())
	delete(u.Object, "status")

	return u, nil
}

// nodeAffinity is k8stemplates/affinity.go's: Linux on Talos' architectures.
func nodeAffinity() *corev1.NodeAffinity {
	return &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
			{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}},
			{Key: "kubernetes.io/arch", Operator: corev1.NodeSelectorOpIn, Values: constants.SupportedArchitectures},
		}}},
	}}
}

func typeMeta(apiVersion, kind string) metav1.TypeMeta {
	return metav1.TypeMeta{APIVersion: apiVersion, Kind: kind}
}

func coreDNSServiceAccount() kruntime.Object {
	return &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: coreDNSName, Namespace: kubeSystem}}
}

func coreDNSClusterRole() kruntime.Object {
	return &rbacv1.ClusterRole{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns", Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
}

func coreDNSClusterRoleBinding() kruntime.Object {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: "system:coredns",
			Labels:      map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
			Annotations: map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "true"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:coredns"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: coreDNSName, Namespace: kubeSystem}},
	}
}

// coreDNSConfigMap is coredns.go CoreDNSConfigMap's Corefile.
func coreDNSConfigMap(domain string) kruntime.Object {
	corefile := fmt.Sprintf(`.:53 {
    errors
    health {
        lameduck 5s
    }
    ready
    log . {
        class error
    }
    prometheus :9153

    kubernetes %s in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30`, domain)
	if domain != "" {
		corefile += fmt.Sprintf(" {\n       disable success %s\n       disable denial %s\n    }\n", domain, domain)
	} else {
		corefile += "\n"
	}

	corefile += "    loop\n    reload\n    loadbalance\n}\n"

	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"), ObjectMeta: metav1.ObjectMeta{Name: coreDNSName, Namespace: kubeSystem}, Data: map[string]string{"Corefile": corefile}}
}

// coreDNSDeployment is coredns.go CoreDNSDeployment.
func coreDNSDeployment(image string) kruntime.Object {
	labels := map[string]string{"k8s-app": "kube-dns"}

	return &appsv1.Deployment{
		TypeMeta:   typeMeta("apps/v1", "Deployment"),
		ObjectMeta: metav1.ObjectMeta{Name: coreDNSName, Namespace: kubeSystem, Labels: map[string]string{"k8s-app": "kube-dns", "kubernetes.io/name": "CoreDNS"}},
		Spec: appsv1.DeploymentSpec{
			Replicas: new(int32(coreDNSReplicas)),
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: new(intstr.FromInt(1))}},
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{"kubernetes.io/os": "linux"},
					Affinity: &corev1.Affinity{NodeAffinity: nodeAffinity(), PodAntiAffinity: &corev1.PodAntiAffinity{
						PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{
							LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "k8s-app", Operator: metav1.LabelSelectorOpIn, Values: []string{"kube-dns"}}}},
							TopologyKey:   "kubernetes.io/hostname",
						}}},
					}},
					ServiceAccountName: coreDNSName,
					PriorityClassName:  "system-cluster-critical",
					Tolerations: []corev1.Toleration{
						{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
						{Key: "node.cloudprovider.kubernetes.io/uninitialized", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
					},
					Containers: []corev1.Container{{
						Name: coreDNSName, Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Resources: corev1.ResourceRequirements{
							Limits:   corev1.ResourceList{corev1.ResourceMemory: apiresource.MustParse("170Mi")},
							Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("70Mi")},
						},
						Env:          []corev1.EnvVar{{Name: "GOMEMLIMIT", Value: "161MiB"}},
						Args:         []string{"-conf", "/etc/coredns/Corefile"},
						VolumeMounts: []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
						Ports: []corev1.ContainerPort{
							{Name: "dns", Protocol: corev1.ProtocolUDP, ContainerPort: 53},
							{Name: "dns-tcp", Protocol: corev1.ProtocolTCP, ContainerPort: 53},
							{Name: "metrics", Protocol: corev1.ProtocolTCP, ContainerPort: 9153},
						},
						LivenessProbe: &corev1.Probe{
							ProbeHandler:        corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/health", Port: intstr.FromInt(8080), Scheme: corev1.URISchemeHTTP}},
							InitialDelaySeconds: 60, TimeoutSeconds: 5, SuccessThreshold: 1, FailureThreshold: 5,
						},
						ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt(8181), Scheme: corev1.URISchemeHTTP}}},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: new(false),
							Capabilities:             &corev1.Capabilities{Add: []corev1.Capability{"NET_BIND_SERVICE"}, Drop: []corev1.Capability{"ALL"}},
							ReadOnlyRootFilesystem:   new(true),
						},
					}},
					DNSPolicy: corev1.DNSDefault,
					Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: coreDNSName},
						Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
					}}}},
				},
			},
		},
	}
}

// coreDNSService is coredns.go CoreDNSService: the ClusterIP pinned to the
// service subnets' tenth address (k8s.DNSServiceAddrs).
func coreDNSService(v4, v6 string) kruntime.Object {
	svc := &corev1.Service{
		TypeMeta: typeMeta("v1", "Service"),
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: kubeSystem,
			Annotations: map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": "9153"},
			Labels:      map[string]string{"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}},
		Spec: corev1.ServiceSpec{
			Selector:  map[string]string{"k8s-app": "kube-dns"},
			ClusterIP: cmp.Or(v4, v6),
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt(53)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(53)},
				{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(9153)},
			},
		},
	}

	if v4 != "" {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, v4)
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPv4Protocol)
	}

	if v6 != "" {
		svc.Spec.ClusterIPs = append(svc.Spec.ClusterIPs, v6)
		svc.Spec.IPFamilies = append(svc.Spec.IPFamilies, corev1.IPv6Protocol)
	}

	if v4 != "" && v6 != "" {
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicyRequireDualStack)
	} else {
		svc.Spec.IPFamilyPolicy = new(corev1.IPFamilyPolicySingleStack)
	}

	return svc
}

// kubeProxyDaemonSet is kube-proxy.go KubeProxyDaemonSetTemplate with the
// flags of manageProxyConfigArgs' command-line mode (argsbuilder sorts
// them by name).
func kubeProxyDaemonSet(image, clusterCIDR, mode string) kruntime.Object {
	labels := map[string]string{"tier": "node", "k8s-app": kubeProxyName}

	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: kubeSystem, Labels: labels},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDaemonSet{MaxUnavailable: new(intstr.FromInt(1))}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: nodeAffinity()},
					Containers: []corev1.Container{{
						Name: kubeProxyName, Image: image,
						Command: []string{"/usr/local/bin/kube-proxy",
							"--cluster-cidr=" + clusterCIDR, "--conntrack-max-per-core=0", "--hostname-override=$(NODE_NAME)",
							"--kubeconfig=/etc/kubernetes/kubeconfig", "--proxy-mode=" + mode},
						Env: []corev1.EnvVar{
							{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}},
							{Name: "POD_IP", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
						},
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("50Mi")},
							Limits:   corev1.ResourceList{},
						},
						SecurityContext: &corev1.SecurityContext{Privileged: new(true)},
						VolumeMounts: []corev1.VolumeMount{
							{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true},
							{Name: "ssl-certs-host", MountPath: "/etc/ssl/certs", ReadOnly: true},
							{Name: "kubeconfig", MountPath: "/etc/kubernetes", ReadOnly: true},
						},
					}},
					HostNetwork:        true,
					PriorityClassName:  "system-cluster-critical",
					ServiceAccountName: kubeProxyName,
					Tolerations: []corev1.Toleration{
						{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
						{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
					},
					Volumes: []corev1.Volume{
						{Name: "lib-modules", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/usr/lib/modules"}}},
						{Name: "ssl-certs-host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/ssl/certs"}}},
						{Name: "kubeconfig", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kubeconfig-in-cluster"}}}},
					},
				},
			},
		},
	}
}

func kubeProxyServiceAccount() kruntime.Object {
	return &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"), ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName, Namespace: kubeSystem}}
}

func kubeProxyClusterRoleBinding() kruntime.Object {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: kubeProxyName},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: kubeProxyName, Namespace: kubeSystem}},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: "system:node-proxier", APIGroup: rbacv1.GroupName},
	}
}
