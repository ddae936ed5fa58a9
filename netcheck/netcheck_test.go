package netcheck_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/machines"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/sim"
)

// resources maps the kinds of the fixtures to what the API server serves.
var resources = map[string]schema.GroupVersionResource{
	"ConfigMap":        {Version: "v1", Resource: "configmaps"},
	"ServiceAccount":   {Version: "v1", Resource: "serviceaccounts"},
	"Pod":              {Version: "v1", Resource: "pods"},
	"DaemonSet":        {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"CiliumNodeConfig": netcheck.CiliumNodeConfigs,
}

func objects(t *testing.T, file string) []*unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			return out
		} else if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}

func client(t *testing.T, dyn dynamic.Interface, u *unstructured.Unstructured) dynamic.ResourceInterface {
	t.Helper()
	gvr, ok := resources[u.GetKind()]
	if !ok {
		t.Fatalf("no resource for kind %s", u.GetKind())
	}
	if u.GetNamespace() == "" {
		return dyn.Resource(gvr)
	}
	return dyn.Resource(gvr).Namespace(u.GetNamespace())
}

// apply creates a fixture's objects and returns a function that deletes them.
func apply(t *testing.T, dyn dynamic.Interface, file string) (remove func()) {
	t.Helper()
	objs := objects(t, file)
	for _, u := range objs {
		if _, err := client(t, dyn, u).Create(t.Context(), u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: create %s %s: %v", file, u.GetKind(), u.GetName(), err)
		}
	}
	return func() {
		t.Helper()
		for _, u := range objs {
			if err := client(t, dyn, u).Delete(context.Background(), u.GetName(), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil && !apierrors.IsNotFound(err) {
				t.Fatalf("%s: delete %s %s: %v", file, u.GetKind(), u.GetName(), err)
			}
		}
	}
}

type bed struct {
	fleet *simtest.Fleet
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	exec  netcheck.Execer
	env   *testenv.Env
}

// ext is the Extension as devata drift wires it, with the bed's clients.
func (b *bed) ext() machines.Extension {
	return netcheck.Extension(b.kube, b.exec, b.fleet.Inventory)
}

// sync runs one round of the simulated kubelets (Nodes and agent pods).
func (b *bed) sync(t *testing.T) {
	t.Helper()
	if errs := b.fleet.Sim.SyncKubelets(t.Context(), b.kube); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// fault changes one machine's faults, syncs the kubelets and returns the
// function that restores them.
func (b *bed) fault(t *testing.T, machine string, change func(*sim.Faults)) (restore func()) {
	t.Helper()
	m := b.fleet.Sim.Machine(machine)
	before := m.Faults()
	f := m.Faults()
	change(&f)
	m.SetFaults(f)
	b.sync(t)
	return func() { m.SetFaults(before); b.sync(t) }
}

// requests counts the API requests made through a client, by method and path.
type requests struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *requests) RoundTrip(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(r *http.Request) (*http.Response, error) {
		c.mu.Lock()
		c.n[r.Method+" "+r.URL.Path]++
		c.mu.Unlock()
		return next.RoundTrip(r)
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// counted is a client on env whose requests are counted.
func counted(t *testing.T, env *testenv.Env) (kubernetes.Interface, *requests) {
	t.Helper()
	c := &requests{n: map[string]int{}}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(c.RoundTrip)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube, c
}

// start serves the homelab fleet (etcd bootstrapped, so control planes have
// a ManifestStatus), registers its Nodes in a real API server and installs
// Cilium's CRD and a healthy Helm install there.
func start(t *testing.T) *bed {
	t.Helper()
	env := testenv.Start(t)
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	if errs := f.Sim.SyncKubelets(t.Context(), kube); len(errs) > 0 {
		t.Fatal(errs)
	}
	if err := sim.InstallCilium(t.Context(), env.Config); err != nil {
		t.Fatal(err)
	}
	apply(t, dyn, "cnc-harmless.yaml")
	ex, err := netcheck.NewPodsExec(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	b := &bed{fleet: f, kube: kube, dyn: dyn, exec: ex, env: env}
	b.sync(t) // the agent pods, now that the DaemonSet exists
	return b
}

// drift runs devata drift's pass with the cilium checks only, through the
// Extension as devata wires it.
func (b *bed) drift(t *testing.T, ext machines.Extension) map[string]drift.Result {
	t.Helper()
	return b.driftWith(t, ext, []string{netcheck.CheckDeclaration, netcheck.CheckAgent, netcheck.CheckServices}, 3)
}

// driftWith runs a pass with the given checks and expects perMachine
// results for each machine.
func (b *bed) driftWith(t *testing.T, ext machines.Extension, checks []string, perMachine int) map[string]drift.Result {
	t.Helper()
	f := b.fleet
	rep := drift.NewReport(drift.Header{Cluster: f.Inventory.Cluster.Name, Simulated: true})
	fc := &machines.FleetCheck{
		Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer, Kube: b.kube,
		Extensions: []machines.Extension{ext},
		Checks:     checks,
		// The config check is not asked for, but the machine observation
		// (the active config) is read all the same.
		Concurrency: 4, Timeout: 10 * time.Second,
	}
	if err := fc.Run(t.Context(), rep); err != nil {
		t.Fatal(err)
	}
	rep.Finish()
	out := map[string]drift.Result{}
	for _, r := range rep.Results {
		key := r.Machine + "/" + r.Check
		if _, dup := out[key]; dup {
			t.Errorf("two results for %s", key)
		}
		out[key] = r
	}
	if want := perMachine * len(f.Inventory.Machines); len(out) != want {
		t.Errorf("%d results, want %d", len(out), want)
	}
	return out
}

func describe(r drift.Result) string {
	return fmt.Sprintf("%s/%s [%s] %s: %s (desired %q, actual %q) evidence %q next %q", r.Machine, r.Check, r.Rung, r.Status, r.Reason, r.Desired, r.Actual, r.Evidence, r.Next)
}

// expect checks one result's status, that its reason and next contain the
// given texts, and that it names its rung and (unless InSync) the next thing
// to inspect.
func expect(t *testing.T, rs map[string]drift.Result, key string, status drift.Status, reasonHas, nextHas string) {
	t.Helper()
	wantRung := drift.RungDeclaration
	switch {
	case strings.HasSuffix(key, netcheck.CheckAgent):
		wantRung = drift.RungReconciliation
	case strings.HasSuffix(key, netcheck.CheckServices):
		wantRung = drift.RungInfrastructure
	}
	expectRung(t, rs, key, wantRung, status, reasonHas, nextHas)
}

func expectRung(t *testing.T, rs map[string]drift.Result, key string, wantRung drift.Rung, status drift.Status, reasonHas, nextHas string) {
	t.Helper()
	r, ok := rs[key]
	if !ok {
		t.Errorf("%s: no result", key)
		return
	}
	switch {
	case r.Status != status, !strings.Contains(r.Reason, reasonHas), !strings.Contains(r.Next, nextHas):
		t.Errorf("got %s\nwant %s with reason %q and next %q", describe(r), status, reasonHas, nextHas)
	case r.Rung != wantRung:
		t.Errorf("%s: rung %q, want %q", key, r.Rung, wantRung)
	case status != drift.StatusInSync && r.Next == "":
		t.Errorf("%s: no next step: %s", key, describe(r))
	case status == drift.StatusInSync && len(r.Evidence) == 0:
		t.Errorf("%s: InSync without evidence", key)
	}
}

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
		if !strings.Contains(svc, "db/get frontends: frontend 10.0.0.1:443/TCP → ") || !strings.Contains(svc, "(Done)") {
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
			"talosctl -n 10.20.0.21 get kubeprismstatuses")
		// An agent that cannot reach the API server has no Service frontends.
		expect(t, rs, "worker-1/"+netcheck.CheckServices, drift.StatusDrifted,
			"has no frontend for the kubernetes Service ClusterIP 10.0.0.1:443/TCP", "db/show frontends")
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
		rs := b.drift(t, netcheck.Extension(nil, nil, f.Inventory))
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
			"frontend 10.0.0.1:443/TCP lacks backend ", "cilium-dbg shell -- db/get frontends 10.0.0.1:443/TCP")
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
		expect(t, rs, "worker-1/"+netcheck.CheckServices, drift.StatusDrifted, "frontend 10.0.0.1:443/TCP stuck Pending since ", "db/show frontends")
		expect(t, rs, "worker-2/"+netcheck.CheckServices, drift.StatusDrifted,
			"frontend 10.0.0.1:443/TCP failed to reconcile into the BPF maps: update services map: map is full", "grep -i frontend")
	})

	t.Run("agent without the statedb shell", func(t *testing.T) {
		defer b.fault(t, "cp-1", func(f *sim.Faults) { f.CiliumNoShell = true })()
		defer b.fault(t, "cp-3", func(f *sim.Faults) {
			f.CiliumNoShell, f.CiliumBackendsMissing = true, []string{"default/kubernetes"}
		})()
		rs := b.drift(t, b.ext())
		expect(t, rs, "cp-1/"+netcheck.CheckServices, drift.StatusInSync, "", "")
		if ev := strings.Join(rs["cp-1/"+netcheck.CheckServices].Evidence, "\n"); !strings.Contains(ev, "service list (no statedb shell: stuck frontends not visible): frontend 10.0.0.1:443/TCP → ") {
			t.Errorf("cp-1 evidence does not say the frontends came from service list:\n%s", ev)
		}
		expect(t, rs, "cp-3/"+netcheck.CheckServices, drift.StatusDrifted, "frontend 10.0.0.1:443/TCP lacks backend ", "")
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
		rs := b.drift(t, netcheck.Extension(kube, ex, f.Inventory))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
			expect(t, rs, m+"/"+netcheck.CheckAgent, drift.StatusUnknown, "forbidden", "devata-netcheck-exec Role")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusUnknown, "forbidden", "see the cilium-agent result")
		}
		defer bindDeployRBAC(t, b, user, "Role")()
		waitAllowed(t, kube, authv1.ResourceAttributes{Verb: "create", Resource: "pods", Subresource: "exec", Namespace: "kube-system"})
		rs = b.drift(t, netcheck.Extension(kube, ex, f.Inventory))
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
		rs := b.drift(t, netcheck.Extension(b.kube, ex, f.Inventory))
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
		rs := b.drift(t, netcheck.Extension(kube, b.exec, f.Inventory))
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
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusUnknown, "", "talosctl -n 10.20.0.22 version")
		expect(t, rs, "worker-1/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
	})
}

// bindDeployRBAC creates the ClusterRole or the Role of a file in deploy/
// (netcheck-rbac.yaml unless given) and binds it to user instead of
// devata's ServiceAccount; it returns the function that deletes both.
func bindDeployRBAC(t *testing.T, b *bed, user, kind string, file ...string) (remove func()) {
	t.Helper()
	name := "netcheck-rbac.yaml"
	if len(file) > 0 {
		name = file[0]
	}
	data, err := os.ReadFile(filepath.Join("..", "deploy", name))
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	ctx := t.Context()
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
			t.Fatalf("deploy/%s has no %s", name, kind)
		} else if err != nil {
			t.Fatal(err)
		}
		if u.GetKind() != kind {
			continue
		}
		var role rbacv1.ClusterRole // a Role has the same rules
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &role); err != nil {
			t.Fatal(err)
		}
		rbac := b.kube.RbacV1()
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: role.Name}
		subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
		meta := metav1.ObjectMeta{Name: role.Name, Namespace: role.Namespace}
		if kind == "ClusterRole" {
			must(t, create(rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: meta, Rules: role.Rules}, metav1.CreateOptions{})))
			must(t, create(rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})))
			return func() {
				must(t, rbac.ClusterRoleBindings().Delete(context.Background(), role.Name, metav1.DeleteOptions{}))
				must(t, rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{}))
			}
		}
		must(t, create(rbac.Roles(role.Namespace).Create(ctx, &rbacv1.Role{ObjectMeta: meta, Rules: role.Rules}, metav1.CreateOptions{})))
		must(t, create(rbac.RoleBindings(role.Namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: meta, RoleRef: ref, Subjects: subjects}, metav1.CreateOptions{})))
		return func() {
			must(t, rbac.RoleBindings(role.Namespace).Delete(context.Background(), role.Name, metav1.DeleteOptions{}))
			must(t, rbac.Roles(role.Namespace).Delete(context.Background(), role.Name, metav1.DeleteOptions{}))
		}
	}
}

func create[T any](_ T, err error) error { return err }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// leastPrivileged is a client of a new user bound to deploy's read-only
// ClusterRole and nothing else (the binding goes when the test ends).
func leastPrivileged(t *testing.T, b *bed, user string) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	cfg, err := b.env.User(user)
	if err != nil {
		t.Fatal(err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bindDeployRBAC(t, b, user, "ClusterRole"))
	waitAllowed(t, kube, authv1.ResourceAttributes{Verb: "list", Group: "apps", Resource: "daemonsets"})
	return cfg, kube
}

// waitAllowed waits until the API server's RBAC cache lets kube's user do what
// attrs says.
func waitAllowed(t *testing.T, kube kubernetes.Interface, attrs authv1.ResourceAttributes) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r, err := kube.AuthorizationV1().SelfSubjectAccessReviews().Create(t.Context(),
			&authv1.SelfSubjectAccessReview{Spec: authv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &attrs}}, metav1.CreateOptions{})
		if err == nil && r.Status.Allowed {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not allowed to %+v after 30s: %v", attrs, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
