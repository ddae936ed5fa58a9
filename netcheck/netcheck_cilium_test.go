package netcheck_test

import (
	"context"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	authv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"devata.dev/devata/drift"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/sim"
)

func TestCiliumChecks(t *testing.T) {
	b := start(t)
	f := b.fleet
	machinesOf := func() []string {
		var names []string
		for _, m := range f.Inventory.Machines {
			names = append(names, m.Name)
		}
		return names
	}()

	t.Run("healthy fleet is in sync", func(t *testing.T) {
		rs := b.drift(t, b.ext())
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
			expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusInSync, "", "")
		}
		agent := strings.Join(rs["worker-2/"+netcheck.CheckAgent].Evidence, "\n")
		for _, want := range []string{" Ready on node worker-2", "cilium-dbg status: KubeProxyReplacement True, NodePort enabled, Kubernetes Ok, 2 controllers none failing"} {
			if !strings.Contains(agent, want) {
				t.Errorf("worker-2 agent evidence lacks %q:\n%s", want, agent)
			}
		}
		svc := strings.Join(rs["worker-2/"+netcheck.CheckServices].Evidence, "\n")
		if !strings.Contains(svc, "db/get frontends: frontend 10.96.0.1:443/TCP → ") || !strings.Contains(svc, "(Done)") {
			t.Errorf("worker-2 services evidence lacks the kubernetes frontend:\n%s", svc)
		}
		ev := strings.Join(rs["cp-1/"+netcheck.CheckDeclaration].Evidence, "\n")
		for _, want := range []string{
			"MachineConfig cluster.network.cni.name none",
			"MachineConfig cluster.proxy.disabled true",
			"ManifestStatus without kube-proxy",
			"KubePrismStatuses 127.0.0.1:7445 healthy true",
			"DaemonSet kube-system/cilium KUBERNETES_SERVICE_HOST=localhost",
			"DaemonSet kube-system/cilium KUBERNETES_SERVICE_PORT=7445",
			"ConfigMap kube-system/cilium-config kube-proxy-replacement=true",
			"1 CiliumNodeConfigs, none overrides kube-proxy-replacement",
		} {
			if !strings.Contains(ev, want) {
				t.Errorf("cp-1 evidence lacks %q:\n%s", want, ev)
			}
		}
	})

	t.Run("kube-proxy still running after the switch", func(t *testing.T) {
		defer apply(t, b.dyn, "kube-proxy.yaml")()
		rs := b.drift(t, b.ext())
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusDrifted,
				"kube-proxy DaemonSet kube-system/kube-proxy still present",
				"Talos never deletes manifests it created: confirm cluster.proxy.disabled")
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
		}
		expect(t, rs, "worker-1/"+netcheck.CheckServices, drift.StatusDrifted, "kube-proxy pod kube-system/kube-proxy-x7k2p runs on node worker-1", "kubectl -n kube-system delete daemonset kube-proxy")
		if r := rs["worker-2/"+netcheck.CheckServices]; strings.Contains(r.Reason, "pod") {
			t.Errorf("worker-2 blamed for worker-1's pod: %s", describe(r))
		}
	})

	t.Run("KPR false on one node via CiliumNodeConfig", func(t *testing.T) {
		defer apply(t, b.dyn, "cnc-kpr-off-worker-2.yaml")()
		rs := b.drift(t, b.ext())
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusDrifted,
			`CiliumNodeConfig kube-system/kpr-off-worker-2 sets kube-proxy-replacement="false" on node worker-2`,
			"kubectl -n kube-system get ciliumnodeconfig kpr-off-worker-2 -o yaml")
		// The agent itself, asked through pods/exec, confirms it.
		expect(t, rs, "worker-2/"+netcheck.CheckAgent, drift.StatusDrifted,
			`agent runs with kube-proxy replacement "False"; agent has NodePort disabled`, "kubectl get ciliumnodeconfigs -A -o yaml")
		for _, m := range machinesOf {
			if m != "worker-2" {
				expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
				expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
			}
		}
	})

	t.Run("KubePrism off on a node whose agent uses localhost", func(t *testing.T) {
		f.Drift(t, "worker-1", "kubePrism:\n            enabled: true", "kubePrism:\n            enabled: false")
		// Drifting to the desired config itself undoes the drift.
		defer f.Drift(t, "worker-1", "kubePrism:\n            enabled: true", "kubePrism:\n            enabled: true")
		rs := b.drift(t, b.ext())
		expect(t, rs, "worker-1/"+netcheck.CheckDeclaration, drift.StatusDrifted,
			"KubePrism is not running on the node, but the cilium agent is pointed at localhost:7445", "get kubeprismconfig")
		expect(t, rs, "worker-1/"+netcheck.CheckAgent, drift.StatusDrifted,
			"agent's Kubernetes connectivity is Failure: Get \"https://localhost:7445/version\": dial tcp 127.0.0.1:7445: connect: connection refused",
			// the hint names the node as devata dialed it (issue 17: not an inventory address the sim does not listen on)
			"talosctl -n "+f.Overrides["worker-1"]+" get kubeprismstatuses")
		// An agent that cannot reach the API server has no Service frontends.
		expect(t, rs, "worker-1/"+netcheck.CheckServices, drift.StatusDrifted,
			"has no frontend for the kubernetes Service ClusterIP 10.96.0.1:443/TCP", "db/show frontends")
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
		expect(t, rs, "worker-2/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
	})

	t.Run("proxy re-enabled on a control plane", func(t *testing.T) {
		f.Drift(t, "cp-2", "proxy:\n        disabled: true", "proxy:\n        disabled: false")
		defer f.Drift(t, "cp-2", "proxy:\n        disabled: true", "proxy:\n        disabled: true")
		rs := b.drift(t, b.ext())
		expect(t, rs, "cp-2/"+netcheck.CheckDeclaration, drift.StatusDrifted, "active config has cluster.proxy.disabled false, inventory kubeProxy false", "devata apply --machines cp-2")
		expect(t, rs, "cp-2/"+netcheck.CheckDeclaration, drift.StatusDrifted, "Talos applies the kube-proxy manifest 10-kube-proxy", "")
	})

	t.Run("cilium-config without kube-proxy replacement", func(t *testing.T) {
		cm, err := b.kube.CoreV1().ConfigMaps("kube-system").Get(t.Context(), netcheck.ConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[netcheck.KeyKPR] = "false"
		if _, err := b.kube.CoreV1().ConfigMaps("kube-system").Update(t.Context(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		defer func() {
			cm.Data[netcheck.KeyKPR] = "true"
			cm.ResourceVersion = ""
			if _, err := b.kube.CoreV1().ConfigMaps("kube-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}()
		rs := b.drift(t, b.ext())
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusDrifted, `ConfigMap kube-system/cilium-config has kube-proxy-replacement="false"`, "helm upgrade cilium")
		}
	})

	t.Run("no kubeconfig", func(t *testing.T) {
		rs := b.drift(t, with(nil, netcheck.Options{}))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusUnknown, "no kubeconfig", "--kubeconfig")
			expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusUnknown, "no kubeconfig", "--kubeconfig")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusUnknown, "no kubeconfig", "--kubeconfig")
		}
		// The Talos side is still read and shown.
		if ev := strings.Join(rs["cp-1/"+netcheck.CheckDeclaration].Evidence, "\n"); !strings.Contains(ev, "KubePrismStatuses 127.0.0.1:7445 healthy true") {
			t.Errorf("cp-1 evidence without Kubernetes: %s", ev)
		}
	})

	t.Run("agent pod not Ready", func(t *testing.T) {
		defer b.fault(t, "cp-3", func(f *sim.Faults) { f.CiliumAgentNotReady = true })()
		rs := b.drift(t, b.ext())
		expect(t, rs, "cp-3/"+netcheck.CheckAgent, drift.StatusDrifted,
			"on node cp-3 is not Ready (Running, ContainersNotReady: containers with unready status: [cilium-agent])", "kubectl -n kube-system describe pod cilium-")
		expect(t, rs, "cp-2/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
	})

	t.Run("frontend missing a backend", func(t *testing.T) {
		defer b.fault(t, "cp-2", func(f *sim.Faults) { f.CiliumBackendsMissing = []string{"default/kubernetes"} })()
		rs := b.drift(t, b.ext())
		expect(t, rs, "cp-2/"+netcheck.CheckServices, drift.StatusDrifted,
			"frontend 10.96.0.1:443/TCP lacks backend ", "cilium-dbg shell -- db/get frontends 10.96.0.1:443/TCP")
		if r := rs["cp-2/"+netcheck.CheckServices]; !strings.Contains(r.Reason, "that EndpointSlice default/kubernetes lists") {
			t.Errorf("reason does not name the EndpointSlice: %s", describe(r))
		}
		expect(t, rs, "cp-1/"+netcheck.CheckServices, drift.StatusInSync, "", "")
		expect(t, rs, "cp-2/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
	})

	t.Run("frontends stuck", func(t *testing.T) {
		defer b.fault(t, "worker-1", func(f *sim.Faults) { f.CiliumFrontendsStuck = map[string]string{"default/kubernetes": ""} })()
		defer b.fault(t, "worker-2", func(f *sim.Faults) {
			f.CiliumFrontendsStuck = map[string]string{"default/kubernetes": "update services map: map is full"}
		})()
		rs := b.drift(t, b.ext())
		expect(t, rs, "worker-1/"+netcheck.CheckServices, drift.StatusDrifted, "frontend 10.96.0.1:443/TCP stuck Pending since ", "db/show frontends")
		expect(t, rs, "worker-2/"+netcheck.CheckServices, drift.StatusDrifted,
			"frontend 10.96.0.1:443/TCP failed to reconcile into the BPF maps: update services map: map is full", "grep -i frontend")
	})

	t.Run("agent without the statedb shell", func(t *testing.T) {
		defer b.fault(t, "cp-1", func(f *sim.Faults) { f.CiliumNoShell = true })()
		defer b.fault(t, "cp-3", func(f *sim.Faults) {
			f.CiliumNoShell, f.CiliumBackendsMissing = true, []string{"default/kubernetes"}
		})()
		rs := b.drift(t, b.ext())
		expect(t, rs, "cp-1/"+netcheck.CheckServices, drift.StatusInSync, "", "")
		if ev := strings.Join(rs["cp-1/"+netcheck.CheckServices].Evidence, "\n"); !strings.Contains(ev, "service list (no statedb shell: stuck frontends not visible): frontend 10.96.0.1:443/TCP → ") {
			t.Errorf("cp-1 evidence does not say the frontends came from service list:\n%s", ev)
		}
		expect(t, rs, "cp-3/"+netcheck.CheckServices, drift.StatusDrifted, "frontend 10.96.0.1:443/TCP lacks backend ", "")
	})

	t.Run("failing controllers", func(t *testing.T) {
		defer b.fault(t, "worker-1", func(f *sim.Faults) { f.CiliumControllersFailing = []string{"cilium-health-ep"} })()
		rs := b.drift(t, b.ext())
		expect(t, rs, "worker-1/"+netcheck.CheckAgent, drift.StatusDrifted, "1 agent controllers failing: cilium-health-ep (simulated failure)", "(Controller Status)")
	})

	t.Run("agent reply in an unexpected shape", func(t *testing.T) {
		old, err := os.ReadFile(filepath.Join("testdata", "agent-status-kpr-strict.json"))
		if err != nil {
			t.Fatal(err)
		}
		defer b.fault(t, "cp-1", func(f *sim.Faults) { f.CiliumStatusReply = string(old) })()
		rs := b.drift(t, b.ext())
		expect(t, rs, "cp-1/"+netcheck.CheckAgent, drift.StatusUnknown, "cilium-dbg status: ", "cilium-dbg status -o json")
		if r := rs["cp-1/"+netcheck.CheckAgent]; !strings.Contains(r.Reason, "Strict") {
			t.Errorf("the parse error does not say what was wrong: %s", describe(r))
		}
	})

	t.Run("exec forbidden", func(t *testing.T) {
		// devata's own RBAC, bound to a user: the read-only ClusterRole
		// alone leaves the agent checks Unknown; with the exec Role they run.
		const user = "netcheck-least-privilege"
		cfg, kube := leastPrivileged(t, b, user)
		ex, err := netcheck.NewPodsExec(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rs := b.drift(t, with(kube, netcheck.Options{Exec: ex}))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
			expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusUnknown, "forbidden", "devata-netcheck-exec Role")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusUnknown, "forbidden", "see the cilium-agent result")
		}
		defer bindDeployRBAC(t, b, user, "Role")()
		waitAllowed(t, kube, authv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "kube-system"})
		rs = b.drift(t, with(kube, netcheck.Options{Exec: ex}))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusInSync, "", "")
		}
	})

	t.Run("SPDY when WebSocket is refused on the way", func(t *testing.T) {
		// A proxy in front of the API server that cannot upgrade to
		// WebSocket, as older proxies and API servers cannot: the exec
		// falls back to SPDY through it.
		upstream := rest.CopyConfig(b.env.Config)
		upstream.TLSClientConfig.NextProtos = []string{"http/1.1"} // upgrades need HTTP/1.1
		rt, err := rest.TransportFor(upstream)
		if err != nil {
			t.Fatal(err)
		}
		target, err := url.Parse(b.env.Config.Host)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(target)
		rp.Transport = rt
		var websockets, spdys atomic.Int32
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch strings.ToLower(r.Header.Get("Upgrade")) {
			case "websocket":
				websockets.Add(1)
				http.Error(w, "this proxy does not do WebSocket", http.StatusBadRequest)
				return
			case "spdy/3.1":
				spdys.Add(1)
			}
			rp.ServeHTTP(w, r)
		}))
		defer proxy.Close()
		ex, err := netcheck.NewPodsExec(&rest.Config{Host: proxy.URL})
		if err != nil {
			t.Fatal(err)
		}
		rs := b.drift(t, with(b.kube, netcheck.Options{Exec: ex}))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusInSync, "", "")
		}
		if n := len(machinesOf); int(websockets.Load()) != n || int(spdys.Load()) != n {
			t.Errorf("%d WebSocket and %d SPDY upgrades for %d nodes, want one of each per node", websockets.Load(), spdys.Load(), n)
		}
	})

	t.Run("one exec per node per pass", func(t *testing.T) {
		before := map[string]int{}
		for _, m := range f.Sim.Machines() {
			before[m.Name()] = m.Calls("kubelet/exec")
		}
		b.drift(t, b.ext())
		for _, m := range f.Sim.Machines() {
			if n := m.Calls("kubelet/exec") - before[m.Name()]; n != 1 {
				t.Errorf("%s: %d execs in one pass, want 1", m.Name(), n)
			}
		}
	})

	t.Run("probe", func(t *testing.T) { probeTests(t, b, machinesOf) })

	t.Run("one snapshot per pass", func(t *testing.T) {
		kube, reqs := counted(t, b.env)
		rs := b.drift(t, with(kube, netcheck.Options{Exec: b.exec}))
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
		want := map[string]int{
			"GET /apis/apps/v1/daemonsets":                                    1,
			"GET /api/v1/pods":                                                1,
			"GET /api/v1/nodes":                                               1,
			"GET /apis/cilium.io/v2/ciliumnodeconfigs":                        1,
			"GET /api/v1/namespaces/kube-system/configmaps/cilium-config":     1,
			"GET /api/v1/namespaces/kube-system/pods":                         1,
			"GET /api/v1/namespaces/default/services/kubernetes":              1,
			"GET /apis/discovery.k8s.io/v1/namespaces/default/endpointslices": 1,
		}
		if !maps.Equal(reqs.n, want) {
			t.Errorf("requests for %d machines: %v, want %v", len(machinesOf), reqs.n, want)
		}
	})

	t.Run("Talos API unreachable", func(t *testing.T) {
		m := f.Sim.Machine("worker-2")
		faults := m.Faults()
		faults.Unreachable = true
		m.SetFaults(faults)
		defer func() { faults.Unreachable = false; m.SetFaults(faults) }()
		rs := b.drift(t, b.ext())
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusUnknown, "", "talosctl -n "+f.Overrides["worker-2"]+" version")
		expect(t, rs, "worker-1/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
	})
}
