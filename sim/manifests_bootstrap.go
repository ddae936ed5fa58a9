package sim

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"devata.dev/devata/internal/configview"
	"devata.dev/devata/internal/talos"
)

// The bootstrap manifests besides CoreDNS and kube-proxy, as Talos v1.14.1
// renders them (controllers/k8s/manifest.go render, templates in
// controllers/k8s/internal/k8stemplates; their goldens are in
// deploy/testdata/talos-v1.14.1-manifests and sim/testdata): always the
// kubelet bootstrap token Secret (kubelet.go KubeletBootstrapTokenSecret,
// from cluster.token as secrets/kubelet.go splits it), the three CSR
// ClusterRoleBindings (csr.go), kubeconfig-in-cluster (kubeconfig.go: the
// KubePrism address when KubePrism is on, else the cluster endpoint, as
// control_plane.go ControlPlaneBootstrapManifestsController gives Server)
// and the system:talos-nodes RBAC (talos.go); flannel when the config's
// CNI is flannel (flannel.go; control_plane.go fills its inputs: Talos'
// built-in image, the KubeSpan MTU when no MTU is set, KubePrism as the
// API server address); the serviceaccounts.talos.dev CRD when
// machine.features.kubernetesTalosAPIAccess is enabled (crds.go); and
// each inline manifest as "99-<name>" (controllers/k8s/extra_manifest.go
// process and processInline, adapters/k8s/manifest.go SetYAML: YAML
// documents, comment-only ones skipped, Lists unwrapped).

// Manifest names, as manifest.go and extra_manifest.go render them.
const (
	manifestBootstrapToken   = "00-kubelet-bootstrapping-token"
	manifestCSRNodeBootstrap = "01-csr-node-bootstrap"
	manifestCSRApprover      = "01-csr-approver-role-binding"
	manifestCSRRenewal       = "01-csr-renewal-role-binding"
	manifestFlannel          = "05-flannel"
	manifestKubeconfig       = "11-kube-config-in-cluster"
	manifestTalosNodesRBAC   = "11-talos-node-rbac-template"
	manifestTalosSACRD       = "13-talos-service-account-crd"
	manifestInlinePriority   = "99-"
)

// flannelDefaults are each Talos release's built-in flannel and
// kube-network-policies versions (machinery constants FlannelVersion,
// KubeNetworkPoliciesVersion in v1.11.0, v1.12.4, v1.13.9, v1.14.1; the
// image is pkg/images Flannel's ghcr.io/siderolabs/flannel): the machine's
// Talos decides them, not the config.
var flannelDefaults = map[int][2]string{
	11: {"v0.27.2", ""}, 12: {"v0.27.4", ""}, 13: {"0.28.8", "v1.1.0"}, 14: {"0.28.9", "v1.1.1"},
}

// flannelImages are the flannel and kube-network-policies images of the
// machine's Talos.
func flannelImages(s snapshot) (flannel, netpol string) {
	v := [2]string{constants.FlannelVersion, constants.KubeNetworkPoliciesVersion}
	if minor, ok := talos.Minor(s.version); ok {
		if d, ok := flannelDefaults[minor]; ok {
			v = d
		}
	}

	return "ghcr.io/siderolabs/flannel:" + v[0], "registry.k8s.io/networking/kube-network-policies:" + cmp.Or(v[1], constants.KubeNetworkPoliciesVersion)
}

// bootstrapRBACManifests are the manifests every control plane renders,
// whatever its config enables.
func bootstrapRBACManifests(s snapshot) []renderedManifest {
	token := s.active.Cluster().Token()

	return append(csrManifests(),
		renderedManifest{manifestBootstrapToken, []kruntime.Object{bootstrapTokenSecret(token.ID(), token.Secret())}},
		renderedManifest{manifestKubeconfig, []kruntime.Object{kubeconfigInCluster(bootstrapServer(s.active))}},
		renderedManifest{manifestTalosNodesRBAC, []kruntime.Object{talosNodesClusterRoleBinding(), talosNodesClusterRole()}},
	)
}

// csrManifests are the ClusterRoleBindings that let kubelets bootstrap and
// renew their client certificates (csr.go).
func csrManifests() []renderedManifest {
	return []renderedManifest{
		{manifestCSRNodeBootstrap, []kruntime.Object{clusterRoleBinding("system-bootstrap-node-bootstrapper", "system:node-bootstrapper", "system:bootstrappers:nodes", "system:nodes")}},
		{manifestCSRApprover, []kruntime.Object{clusterRoleBinding("system-bootstrap-approve-node-client-csr", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "system:bootstrappers:nodes")}},
		{manifestCSRRenewal, []kruntime.Object{clusterRoleBinding("system-bootstrap-node-renewal", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "system:nodes")}},
	}
}

// optionalManifests are the manifests a control plane renders when its
// config asks: flannel, the Talos ServiceAccount CRD, inline manifests.
func optionalManifests(s snapshot) []renderedManifest {
	var out []renderedManifest

	if configview.CNI(s.active) == constants.FlannelCNI {
		out = append(out, renderedManifest{manifestFlannel, flannelObjects(s)})
	}

	if s.active.K8sTalosAPIAccessConfig() != nil {
		out = append(out, renderedManifest{manifestTalosSACRD, []kruntime.Object{talosServiceAccountCRD()}})
	}

	// extra manifests (manifests_extra.go), then inline ones, as
	// ExtraManifestsConfig lists them
	for _, em := range s.active.K8sExternalManifestConfigs() {
		body, ok := s.extraManifests[em.URL()]
		if !ok {
			continue // not downloaded (yet): no Manifest resource
		}

		objs, err := inlineObjects(body)
		if err != nil {
			continue
		}

		out = append(out, renderedManifest{manifestInlinePriority + em.Name(), objs})
	}

	for _, im := range s.active.K8sInlineManifestConfigs() {
		objs, err := inlineObjects(im.Contents())
		if err != nil {
			continue // as Talos: SetYAML fails, this Manifest is not written, the others are (extra_manifest.go)
		}

		out = append(out, renderedManifest{manifestInlinePriority + im.Name(), objs})
	}

	return out
}

// bootstrapServer is the API server address kubeconfig-in-cluster names.
func bootstrapServer(c config.Config) string {
	if kp := c.K8sKubePrismConfig(); kp != nil {
		return fmt.Sprintf("https://127.0.0.1:%d", kp.Port())
	}

	return c.K8sClusterConfig().ClusterEndpoint().String()
}

// bootstrapTokenSecret is the kubelet's bootstrap token, in stringData as
// Talos writes it: the API server stores it base64-encoded in data.
func bootstrapTokenSecret(id, secret string) kruntime.Object {
	return &corev1.Secret{
		TypeMeta:   typeMeta("v1", "Secret"),
		ObjectMeta: metav1.ObjectMeta{Name: "bootstrap-token-" + id, Namespace: kubeSystem},
		Type:       corev1.SecretType("bootstrap.kubernetes.io/token"),
		StringData: map[string]string{
			"token-id": id, "token-secret": secret,
			"usage-bootstrap-authentication": "true", "auth-extra-groups": "system:bootstrappers:nodes",
		},
	}
}

// clusterRoleBinding binds groups to a ClusterRole, as csr.go's three do.
func clusterRoleBinding(name, role string, groups ...string) kruntime.Object {
	crb := &rbacv1.ClusterRoleBinding{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{Kind: "ClusterRole", Name: role, APIGroup: rbacv1.GroupName},
	}
	for _, g := range groups {
		crb.Subjects = append(crb.Subjects, rbacv1.Subject{Kind: "Group", Name: g, APIGroup: rbacv1.GroupName})
	}

	return crb
}

// kubeconfigInCluster is the kubeconfig kube-proxy (and flannel) mount: the
// pod's service account token against server.
func kubeconfigInCluster(server string) kruntime.Object {
	kubeconfig, err := clientcmd.Write(clientcmdapi.Config{
		Clusters:       map[string]*clientcmdapi.Cluster{"local": {Server: server, CertificateAuthority: "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"}},
		AuthInfos:      map[string]*clientcmdapi.AuthInfo{"service-account": {TokenFile: "/var/run/secrets/kubernetes.io/serviceaccount/token"}},
		Contexts:       map[string]*clientcmdapi.Context{"local": {Cluster: "local", AuthInfo: "service-account"}},
		CurrentContext: "local",
	})
	if err != nil {
		kubeconfig = nil // a fixed, valid config always encodes
	}

	return &corev1.ConfigMap{
		TypeMeta:   typeMeta("v1", "ConfigMap"),
		ObjectMeta: metav1.ObjectMeta{Name: "kubeconfig-in-cluster", Namespace: kubeSystem},
		Data:       map[string]string{"kubeconfig": string(kubeconfig)},
	}
}

func talosNodesClusterRoleBinding() kruntime.Object {
	return &rbacv1.ClusterRoleBinding{
		TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: "system:talos-nodes",
			Labels:      map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"},
			Annotations: map[string]string{"rbac.authorization.kubernetes.io/autoupdate": "true"}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:talos-nodes"},
		Subjects: []rbacv1.Subject{{Kind: "Group", Name: "system:nodes", APIGroup: rbacv1.GroupName}},
	}
}

func talosNodesClusterRole() kruntime.Object {
	return &rbacv1.ClusterRole{
		TypeMeta:   typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
		ObjectMeta: metav1.ObjectMeta{Name: "system:talos-nodes", Labels: map[string]string{"kubernetes.io/bootstrapping": "rbac-defaults"}},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}}},
	}
}

// talosServiceAccountCRD is the talos.dev/v1alpha1 ServiceAccount kind
// (constants ServiceAccountResource*), built unstructured: devata does not
// depend on apiextensions' types.
func talosServiceAccountCRD() kruntime.Object {
	str := map[string]any{"type": "string"}
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"spec":   map[string]any{"type": "object", "properties": map[string]any{"roles": map[string]any{"type": "array", "items": str}}},
		"status": map[string]any{"type": "object", "properties": map[string]any{"failureReason": str}},
	}}

	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": constants.ServiceAccountResourcePlural + "." + constants.ServiceAccountResourceGroup},
		"spec": map[string]any{
			"conversion": map[string]any{"strategy": "None"},
			"group":      constants.ServiceAccountResourceGroup,
			"names": map[string]any{
				"kind": constants.ServiceAccountResourceKind, "listKind": constants.ServiceAccountResourceKind + "List",
				"plural": constants.ServiceAccountResourcePlural, "singular": constants.ServiceAccountResourceSingular,
				"shortNames": []any{constants.ServiceAccountResourceShortName},
			},
			"scope": "Namespaced",
			"versions": []any{map[string]any{
				"name": constants.ServiceAccountResourceVersion, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": schema},
			}},
		},
	}}
}

// inlineObjects reads an inline manifest as SetYAML does.
func inlineObjects(contents string) ([]kruntime.Object, error) {
	var out []kruntime.Object

	r := k8syaml.NewYAMLReader(bufio.NewReader(strings.NewReader(contents)))

	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return nil, err
		}

		doc = bytes.TrimSpace(doc)
		if len(doc) == 0 {
			continue
		}

		js, err := k8syaml.ToJSON(doc)
		if err != nil {
			return nil, err
		}

		if bytes.Equal(js, []byte("null")) || bytes.Equal(js, []byte("{}")) {
			continue // comments only
		}

		var obj unstructured.Unstructured
		if err := json.Unmarshal(js, &obj); err != nil {
			return nil, err
		}

		if !obj.IsList() {
			out = append(out, &obj)
			continue
		}

		if err := obj.EachListItem(func(item kruntime.Object) error {
			out = append(out, item)
			return nil
		}); err != nil {
			return nil, err
		}
	}
}

// flannelInputs are what control_plane.go gives flannel's templates.
type flannelInputs struct {
	image, netpolImage       string
	podCIDRs                 []string
	backend                  map[string]any
	resources                config.Resources
	extraArgs                []string
	serviceHost, servicePort string
	networkPolicies          bool
}

// flannelObjects are flannel's ClusterRole, ClusterRoleBinding,
// ServiceAccount, ConfigMap and DaemonSet, in manifest.go's order.
func flannelObjects(s snapshot) []kruntime.Object {
	fc := s.active.K8sFlannelCNIConfig()
	in := flannelInputs{backend: map[string]any{"Type": fc.BackendType()}, resources: fc.Resources(), extraArgs: fc.ExtraArgs(),
		networkPolicies: fc.KubeNetworkPoliciesEnabled()}
	in.image, in.netpolImage = flannelImages(s)

	for _, c := range s.active.K8sNetworkConfig().PodCIDRs() {
		in.podCIDRs = append(in.podCIDRs, c.String())
	}

	if p := fc.BackendPort().ValueOrZero(); p != 0 {
		in.backend["Port"] = p
	}

	mtu := fc.BackendMTU()
	if ks := s.active.NetworkKubeSpanConfig(); !mtu.IsPresent() && ks != nil && ks.Enabled() {
		in.backend["MTU"] = ks.MTU()
	} else if v := mtu.ValueOrZero(); v != 0 {
		in.backend["MTU"] = v
	}

	maps.Copy(in.backend, fc.BackendExtraConfig())

	if kp := s.active.K8sKubePrismConfig(); kp != nil {
		in.serviceHost, in.servicePort = "127.0.0.1", strconv.Itoa(kp.Port())
	}

	return []kruntime.Object{flannelClusterRole(in.networkPolicies), flannelClusterRoleBinding(), flannelServiceAccount(),
		flannelConfigMap(in.podCIDRs, in.backend), flannelDaemonSet(in)}
}

var flannelLabels = map[string]string{"k8s-app": "flannel"}

func flannelNodeLabels() map[string]string {
	return map[string]string{"k8s-app": "flannel", "tier": "node"}
}

func flannelClusterRole(networkPolicies bool) kruntime.Object {
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods", "nodes", "namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes/status"}, Verbs: []string{"patch"}},
	}
	if networkPolicies {
		rules = append(rules,
			rbacv1.PolicyRule{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
			rbacv1.PolicyRule{APIGroups: []string{"policy.networking.k8s.io"}, Resources: []string{"adminnetworkpolicies", "baselineadminnetworkpolicies"}, Verbs: []string{"list", "watch"}})
	}

	return &rbacv1.ClusterRole{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRole"),
		ObjectMeta: metav1.ObjectMeta{Name: "flannel", Labels: maps.Clone(flannelLabels)}, Rules: rules}
}

func flannelClusterRoleBinding() kruntime.Object {
	return &rbacv1.ClusterRoleBinding{TypeMeta: typeMeta("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
		ObjectMeta: metav1.ObjectMeta{Name: "flannel", Labels: maps.Clone(flannelLabels)},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "flannel"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "flannel", Namespace: kubeSystem}}}
}

func flannelServiceAccount() kruntime.Object {
	return &corev1.ServiceAccount{TypeMeta: typeMeta("v1", "ServiceAccount"),
		ObjectMeta: metav1.ObjectMeta{Name: "flannel", Namespace: kubeSystem, Labels: maps.Clone(flannelLabels)}}
}

// flannelCNIConf is the CNI configuration flannel's init container installs.
const flannelCNIConf = `{
  "name": "cbr0",
  "cniVersion": "1.0.0",
  "plugins": [
    {
      "type": "flannel",
      "delegate": {
        "hairpinMode": true,
        "isDefaultGateway": true
      }
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      }
    }
  ]
}`

// flannelConfigMap holds the CNI configuration and flannel's net-conf.json
// (nftables on; IPv4 off when no pod subnet is IPv4).
func flannelConfigMap(podCIDRs []string, backend map[string]any) kruntime.Object {
	var netConf struct {
		Network        string         `json:"Network,omitempty"`
		IPv6Network    string         `json:"IPv6Network,omitempty"`
		EnableIPv6     *bool          `json:"EnableIPv6,omitempty"`
		EnableIPv4     *bool          `json:"EnableIPv4,omitempty"`
		EnableNFTables *bool          `json:"EnableNFTables,omitempty"`
		Backend        map[string]any `json:"Backend"`
	}

	netConf.EnableNFTables, netConf.Backend = new(true), backend

	for _, c := range podCIDRs {
		if strings.Contains(c, ".") {
			netConf.Network = c
		} else {
			netConf.IPv6Network, netConf.EnableIPv6 = c, new(true)
		}
	}

	if netConf.Network == "" {
		netConf.EnableIPv4 = new(false)
	}

	js, err := json.MarshalIndent(netConf, "", "  ")
	if err != nil {
		js = nil // strings, bools and the config's scalars always encode
	}

	return &corev1.ConfigMap{TypeMeta: typeMeta("v1", "ConfigMap"),
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel-cfg", Namespace: kubeSystem, Labels: flannelNodeLabels()},
		Data:       map[string]string{"cni-conf.json": flannelCNIConf, "net-conf.json": string(js)}}
}

// flannelResources are flanneld's requests (100m, 50Mi unless set) and
// limits, and the GOMEMLIMIT a memory limit implies (95 %, resources.go).
func flannelResources(r config.Resources) (corev1.ResourceRequirements, []corev1.EnvVar) {
	rr := corev1.ResourceRequirements{Requests: corev1.ResourceList{
		corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("50Mi")}, Limits: corev1.ResourceList{}}

	set := func(l corev1.ResourceList, name corev1.ResourceName, v string) {
		if q, err := apiresource.ParseQuantity(v); v != "" && err == nil {
			l[name] = q // machinery validated the config's quantities
		}
	}
	if r != nil {
		set(rr.Requests, corev1.ResourceCPU, r.CPURequests())
		set(rr.Requests, corev1.ResourceMemory, r.MemoryRequests())
		set(rr.Limits, corev1.ResourceCPU, r.CPULimits())
		set(rr.Limits, corev1.ResourceMemory, r.MemoryLimits())
	}

	var env []corev1.EnvVar
	if m := rr.Limits[corev1.ResourceMemory]; m.Value() > 0 {
		env = append(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: strconv.FormatInt(m.Value()*95/100, 10)})
	}

	return rr, env
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}

// flannelDaemonSet is flannel.go FlannelDaemonSetTemplate.
func flannelDaemonSet(in flannelInputs) kruntime.Object {
	env := []corev1.EnvVar{fieldEnv("POD_NAME", "metadata.name"), fieldEnv("POD_NAMESPACE", "metadata.namespace"),
		{Name: "EVENT_QUEUE_DEPTH", Value: "5000"}, {Name: "CONT_WHEN_CACHE_NOT_READY", Value: "false"}}
	if in.serviceHost != "" {
		env = append(env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: in.serviceHost}, corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: in.servicePort})
	}

	res, gc := flannelResources(in.resources)
	containers := []corev1.Container{{
		Name: "kube-flannel", Image: in.image, Command: []string{"/opt/bin/flanneld"},
		Args: slices.Concat([]string{"--ip-masq", "--kube-subnet-mgr"}, in.extraArgs), Env: append(env, gc...), Resources: res,
		SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN", "NET_RAW"}}, Privileged: new(false)},
		VolumeMounts:    []corev1.VolumeMount{{Name: "run", MountPath: "/run/flannel"}, {Name: "flannel-cfg", MountPath: "/etc/kube-flannel/"}},
	}}

	volumes := []corev1.Volume{
		{Name: "run", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/run/flannel"}}},
		{Name: "cni", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc/cni/net.d"}}},
		{Name: "flannel-cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-flannel-cfg"}}}},
	}

	if in.networkPolicies {
		volumes = append(volumes, corev1.Volume{Name: "lib-modules", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/usr/lib/modules"}}})
		containers = append(containers, corev1.Container{
			Name: "kube-network-policies", Image: in.netpolImage,
			Command:         []string{"/bin/netpol", "--hostname-override=$(MY_NODE_NAME)", "--v=2"},
			Env:             []corev1.EnvVar{fieldEnv("MY_NODE_NAME", "spec.nodeName")},
			Resources:       corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: apiresource.MustParse("100m"), corev1.ResourceMemory: apiresource.MustParse("50Mi")}},
			SecurityContext: &corev1.SecurityContext{Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"NET_ADMIN"}}, Privileged: new(true)},
			VolumeMounts:    []corev1.VolumeMount{{Name: "lib-modules", MountPath: "/lib/modules", ReadOnly: true}},
		})
	}

	return &appsv1.DaemonSet{
		TypeMeta:   typeMeta("apps/v1", "DaemonSet"),
		ObjectMeta: metav1.ObjectMeta{Name: "kube-flannel", Namespace: kubeSystem, Labels: flannelNodeLabels()},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: flannelNodeLabels()},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: flannelNodeLabels()},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
						NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
							{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}}}}}}},
					Containers: containers,
					InitContainers: []corev1.Container{{
						Name: "install-config", Image: in.image, Command: []string{"cp"},
						Args:         []string{"-f", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"},
						VolumeMounts: []corev1.VolumeMount{{Name: "cni", MountPath: "/etc/cni/net.d"}, {Name: "flannel-cfg", MountPath: "/etc/kube-flannel/"}},
					}},
					HostNetwork: true, PriorityClassName: "system-node-critical", ServiceAccountName: "flannel",
					Tolerations: []corev1.Toleration{
						{Effect: corev1.TaintEffectNoSchedule, Operator: corev1.TolerationOpExists},
						{Effect: corev1.TaintEffectNoExecute, Operator: corev1.TolerationOpExists},
					},
					Volumes: volumes,
				},
			},
		},
	}
}

// createAny applies u with server-side apply unless an object of its name
// exists, for the kinds createIfMissing (manifests_apply.go) has no typed
// client for (the bootstrap token Secret, the CRD, inline manifests' kinds):
// the REST path from discovery, as ManifestApplyController finds it through
// its REST mapper. A kind the API server does not serve fails, as there.
func createAny(ctx context.Context, kc kubernetes.Interface, u *unstructured.Unstructured, data []byte, fieldManager string) error {
	gvk := u.GroupVersionKind()

	list, err := kc.Discovery().ServerResourcesForGroupVersion(gvk.GroupVersion().String())
	if err != nil {
		return fmt.Errorf("no %s served: %w", gvk.GroupVersion(), err)
	}

	i := slices.IndexFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") })
	if i < 0 {
		return fmt.Errorf("no %s served in %s", gvk.Kind, gvk.GroupVersion())
	}

	path := "/apis/" + gvk.Group + "/" + gvk.Version
	if gvk.Group == "" {
		path = "/api/" + gvk.Version
	}

	if list.APIResources[i].Namespaced {
		path += "/namespaces/" + cmp.Or(u.GetNamespace(), metav1.NamespaceDefault)
	}

	path += "/" + list.APIResources[i].Name + "/" + u.GetName()

	rc := kc.Discovery().RESTClient()
	if _, err = rc.Get().AbsPath(path).DoRaw(ctx); !apierrors.IsNotFound(err) {
		return err
	}

	_, err = rc.Patch(types.ApplyPatchType).AbsPath(path).Param("fieldManager", fieldManager).Body(data).DoRaw(ctx)

	return err
}
