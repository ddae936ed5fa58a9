package netcheck_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
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

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
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

// family is the cilium checks as a pass runs them: through the pass's
// Kubernetes client, with what else they use.
type family struct {
	kube kubernetes.Interface
	o    netcheck.Options
}

func with(kube kubernetes.Interface, o netcheck.Options) family { return family{kube: kube, o: o} }

// ext is the cilium checks as devata drift wires them, with the bed's clients.
func (b *bed) ext() family { return with(b.kube, netcheck.Options{Exec: b.exec}) }

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
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
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
func (b *bed) drift(t *testing.T, ext family) map[string]drift.Result {
	t.Helper()
	return b.driftWith(t, ext, []string{netcheck.CheckDeclaration, netcheck.CheckAgent, netcheck.CheckServices}, 3)
}

// driftWith runs a pass with the given checks and expects perMachine
// results for each machine.
func (b *bed) driftWith(t *testing.T, ext family, selected []string, perMachine int) map[string]drift.Result {
	t.Helper()
	f := b.fleet
	rep := drift.NewReport(drift.Header{Cluster: f.Inventory.Cluster.Name, Simulated: true})
	fc := &checks.FleetCheck{
		Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer, Kube: ext.kube,
		Families: netcheck.Checks(ext.o),
		Checks:   selected,
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
