package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/constants"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The sim's bootstrap manifest objects equal Talos v1.14.1's own template
// goldens (k8stemplates_test.go TestTemplates) rendered with the same
// inputs: deploy/testdata/talos-v1.14.1-manifests (bootstrap token, CSR
// bindings, kubeconfig-in-cluster, system:talos-nodes RBAC, the Talos
// ServiceAccount CRD, CoreDNS, kube-proxy's ServiceAccount and binding)
// and sim/testdata/talos-v1.14.1-manifests (flannel). The comparison is
// of the objects as JSON, without status (SetObjects drops it; the CRD's
// golden carries an empty one).
func TestBootstrapManifestsEqualTalosGoldens(t *testing.T) {
	t.Parallel()

	const deployDir, simDir = "../deploy/testdata/talos-v1.14.1-manifests", "testdata/talos-v1.14.1-manifests"

	vxlan := func(extra map[string]any) map[string]any {
		b := map[string]any{"Type": constants.FlannelDefaultBackend, "Port": uint16(constants.FlannelDefaultBackendPort)}
		for k, v := range extra {
			b[k] = v
		}

		return b
	}
	netpol := flannelInputs{image: "quay.io/coreos/flannel:v0.14.0", extraArgs: []string{"--foo=bar"}, networkPolicies: true,
		netpolImage: "registry.k8s.io/networking/kube-network-policies:v0.7.0",
		resources:   testResources{cpuReq: "100m", memReq: "50Mi", cpuLim: "200m", memLim: "100Mi"}}

	for _, c := range []struct {
		golden string
		obj    kruntime.Object
	}{
		{deployDir + "/kubelet-bootstrapping-token.yaml", bootstrapTokenSecret("25p8ak", "vshybadgp2mhtvm7")},
		{deployDir + "/csr-node-bootstrap.yaml", csrManifest(t, manifestCSRNodeBootstrap)},
		{deployDir + "/csr-approver-role-binding.yaml", csrManifest(t, manifestCSRApprover)},
		{deployDir + "/csr-renewal-role-binding.yaml", csrManifest(t, manifestCSRRenewal)},
		{deployDir + "/kubeconfig-in-cluster.yaml", kubeconfigInCluster("https://localhost:6443")},
		{deployDir + "/talos-nodes-rbac-cluster-role-binding.yaml", talosNodesClusterRoleBinding()},
		{deployDir + "/talos-nodes-rbac-cluster-role.yaml", talosNodesClusterRole()},
		{deployDir + "/talos-service-account-crd.yaml", talosServiceAccountCRD()},
		{deployDir + "/coredns-service-account.yaml", coreDNSServiceAccount()},
		{deployDir + "/coredns-cluster-role.yaml", coreDNSClusterRole()},
		{deployDir + "/coredns-cluster-role-binding.yaml", coreDNSClusterRoleBinding()},
		{deployDir + "/coredns-configmap-cluster-domain.yaml", coreDNSConfigMap("cluster.local")},
		{deployDir + "/coredns-service-ipv4.yaml", coreDNSService("10.96.0.10", "")},
		{deployDir + "/kube-proxy-service-account.yaml", kubeProxyServiceAccount()},
		{deployDir + "/kube-proxy-cluster-role-binding.yaml", kubeProxyClusterRoleBinding()},
		{simDir + "/flannel-cluster-role.yaml", flannelClusterRole(false)},
		{simDir + "/flannel-cluster-role-with-network-policies.yaml", flannelClusterRole(true)},
		{simDir + "/flannel-cluster-role-binding.yaml", flannelClusterRoleBinding()},
		{simDir + "/flannel-service-account.yaml", flannelServiceAccount()},
		{simDir + "/flannel-configmap-v4.yaml", flannelConfigMap([]string{"10.96.0.0/12"}, vxlan(nil))},
		{simDir + "/flannel-configmap-v6.yaml", flannelConfigMap([]string{"fd00::/112"}, vxlan(nil))},
		{simDir + "/flannel-configmap-dual.yaml", flannelConfigMap([]string{"10.96.0.0/12", "fd00::/112"}, vxlan(map[string]any{"VNI": 4096}))},
		{simDir + "/flannel-configmap-with-mtu.yaml", flannelConfigMap([]string{"10.96.0.0/12"}, vxlan(map[string]any{"MTU": uint32(1420)}))},
		{simDir + "/flannel-daemonset.yaml", flannelDaemonSet(flannelInputs{image: "quay.io/coreos/flannel:v0.14.0", extraArgs: []string{"--foo=bar"}})},
		{simDir + "/flannel-daemonset-with-network-policies.yaml", flannelDaemonSet(netpol)},
	} {
		t.Run(filepath.Base(c.golden), func(t *testing.T) {
			t.Parallel()

			raw, err := os.ReadFile(c.golden)
			if err != nil {
				t.Fatal(err)
			}

			var want map[string]any
			if err := yaml.Unmarshal(raw, &want); err != nil {
				t.Fatalf("%s: %v", c.golden, err)
			}

			delete(want, "status")

			u, err := toUnstructured(c.obj)
			if err != nil {
				t.Fatal(err)
			}

			js, err := json.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}

			var got map[string]any
			if err := json.Unmarshal(js, &got); err != nil {
				t.Fatal(err)
			}

			if !reflect.DeepEqual(got, want) {
				g, _ := yaml.Marshal(got)
				t.Errorf("the sim renders\n%s\nTalos' golden %s is\n%s", g, c.golden, raw)
			}
		})
	}
}

// csrManifest is the one object of the CSR manifest of that name.
func csrManifest(t *testing.T, name string) kruntime.Object {
	t.Helper()

	for _, rm := range csrManifests() {
		if rm.name == name && len(rm.objs) == 1 {
			return rm.objs[0]
		}
	}

	t.Fatalf("no manifest %s of one object", name)

	return nil
}

// testResources are resource overrides as a config gives them.
type testResources struct{ cpuReq, memReq, cpuLim, memLim string }

func (r testResources) CPURequests() string    { return r.cpuReq }
func (r testResources) MemoryRequests() string { return r.memReq }
func (r testResources) CPULimits() string      { return r.cpuLim }
func (r testResources) MemoryLimits() string   { return r.memLim }
