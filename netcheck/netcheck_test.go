package netcheck_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
)

// resources maps the kinds of the fixtures to what the API server serves.
var resources = map[string]schema.GroupVersionResource{
	"ConfigMap":                {Version: "v1", Resource: "configmaps"},
	"ServiceAccount":           {Version: "v1", Resource: "serviceaccounts"},
	"Pod":                      {Version: "v1", Resource: "pods"},
	"DaemonSet":                {Group: "apps", Version: "v1", Resource: "daemonsets"},
	"CiliumNodeConfig":         netcheck.CiliumNodeConfigs,
	"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
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

// installCRD installs the CiliumNodeConfig CRD and waits until it is served.
func installCRD(t *testing.T, dyn dynamic.Interface) {
	t.Helper()
	apply(t, dyn, "crd-ciliumnodeconfigs.yaml")
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dyn.Resource(netcheck.CiliumNodeConfigs).List(t.Context(), metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CiliumNodeConfig CRD not served: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

type bed struct {
	fleet *simtest.Fleet
	kube  kubernetes.Interface
	dyn   dynamic.Interface
	env   *testenv.Env
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
	installCRD(t, dyn)
	apply(t, dyn, "cilium-helm.yaml")
	apply(t, dyn, "cnc-harmless.yaml")
	return &bed{fleet: f, kube: kube, dyn: dyn, env: env}
}

// drift runs devata drift's pass with the cilium checks only, through the
// Extension as devata wires it.
func (b *bed) drift(t *testing.T, ext machines.Extension) map[string]drift.Result {
	t.Helper()
	f := b.fleet
	rep := drift.NewReport(drift.Header{Cluster: f.Inventory.Cluster.Name, Simulated: true})
	fc := &machines.FleetCheck{
		Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer, Kube: b.kube,
		Extensions: []machines.Extension{ext},
		Checks:     []string{netcheck.CheckDeclaration, netcheck.CheckServices},
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
	if want := 2 * len(f.Inventory.Machines); len(out) != want {
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
	r, ok := rs[key]
	if !ok {
		t.Errorf("%s: no result", key)
		return
	}
	wantRung := drift.RungDeclaration
	if strings.HasSuffix(key, netcheck.CheckServices) {
		wantRung = drift.RungResources
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
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusInSync, "", "")
		}
		ev := strings.Join(rs["cp-1/"+netcheck.CheckDeclaration].Evidence, "\n")
		for _, want := range []string{
			"MachineConfig cluster.network.cni.name none",
			"MachineConfig cluster.proxy.disabled true",
			"ManifestStatus without kube-proxy",
			"KubePrismStatuses localhost:7445 healthy true",
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
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
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
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusDrifted,
			`CiliumNodeConfig kube-system/kpr-off-worker-2 sets kube-proxy-replacement="false" on node worker-2`,
			"kubectl -n kube-system get ciliumnodeconfig kpr-off-worker-2 -o yaml")
		for _, m := range machinesOf {
			if m != "worker-2" {
				expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
			}
		}
	})

	t.Run("KubePrism off on a node whose agent uses localhost", func(t *testing.T) {
		f.Drift(t, "worker-1", "kubePrism:\n            enabled: true", "kubePrism:\n            enabled: false")
		// Drifting to the desired config itself undoes the drift.
		defer f.Drift(t, "worker-1", "kubePrism:\n            enabled: true", "kubePrism:\n            enabled: true")
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
		expect(t, rs, "worker-1/"+netcheck.CheckDeclaration, drift.StatusDrifted,
			"KubePrism is not running on the node, but the cilium agent is pointed at localhost:7445", "get kubeprismconfig")
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
	})

	t.Run("proxy re-enabled on a control plane", func(t *testing.T) {
		f.Drift(t, "cp-2", "proxy:\n        disabled: true", "proxy:\n        disabled: false")
		defer f.Drift(t, "cp-2", "proxy:\n        disabled: true", "proxy:\n        disabled: true")
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
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
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusDrifted, `ConfigMap kube-system/cilium-config has kube-proxy-replacement="false"`, "helm upgrade cilium")
		}
	})

	t.Run("no kubeconfig", func(t *testing.T) {
		rs := b.drift(t, netcheck.Extension(nil, f.Inventory))
		for _, m := range machinesOf {
			expect(t, rs, m+"/"+netcheck.CheckDeclaration, drift.StatusUnknown, "no kubeconfig", "--kubeconfig")
			expect(t, rs, m+"/"+netcheck.CheckServices, drift.StatusUnknown, "no kubeconfig", "--kubeconfig")
		}
		// The Talos side is still read and shown.
		if ev := strings.Join(rs["cp-1/"+netcheck.CheckDeclaration].Evidence, "\n"); !strings.Contains(ev, "KubePrismStatuses localhost:7445 healthy true") {
			t.Errorf("cp-1 evidence without Kubernetes: %s", ev)
		}
	})

	t.Run("one snapshot per pass", func(t *testing.T) {
		kube, reqs := counted(t, b.env)
		rs := b.drift(t, netcheck.Extension(kube, f.Inventory))
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
		want := map[string]int{
			"GET /apis/apps/v1/daemonsets":                                1,
			"GET /api/v1/pods":                                            1,
			"GET /api/v1/nodes":                                           1,
			"GET /apis/cilium.io/v2/ciliumnodeconfigs":                    1,
			"GET /api/v1/namespaces/kube-system/configmaps/cilium-config": 1,
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
		rs := b.drift(t, netcheck.Extension(b.kube, f.Inventory))
		expect(t, rs, "worker-2/"+netcheck.CheckDeclaration, drift.StatusUnknown, "", "talosctl -n 10.20.0.22 version")
		expect(t, rs, "worker-1/"+netcheck.CheckDeclaration, drift.StatusInSync, "", "")
	})
}
