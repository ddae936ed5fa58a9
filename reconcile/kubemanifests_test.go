package reconcile_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
)

// A Kubernetes minor upgrade ends as talosctl upgrade-k8s ends it
// (talos_managed.go Upgrade → PerformManifestsSync): the bootstrap
// manifests a control plane renders are server-side applied to the real
// API server with field manager "talos". The fleet runs v1.33.5 with
// kube-proxy enabled; its CoreDNS was left at an older image (as a
// cluster built on an older Talos keeps it: Talos creates, never updates).
// The plan's dry run names both changes and writes nothing; after the
// rollout the CoreDNS Deployment runs the target's manifest image, the
// kube-proxy DaemonSet the new Kubernetes version, both owned by "talos",
// and a second sync changes nothing.
func TestKubernetesUpgradeSyncsBootstrapManifests(t *testing.T) {
	// the inventory's service subnet: the kube-dns Service pins 10.96.0.10
	_, kc := reconcile.StartTestKube(t, map[string]string{"service-cluster-ip-range": "10.96.0.0/12"})
	h := &harness{f: simtest.Start(t, simtest.Options{Bootstrap: true, KubernetesVersion: "v1.33.5", RestartDelay: 100 * time.Millisecond,
		EditInventory: func(s string) string {
			s = strings.Replace(s, "kubeProxy: false", "kubeProxy: true", 1)
			return strings.Replace(s, "kubeProxyReplacement: true", "kubeProxyReplacement: false", 1)
		}})}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { h.f.Sim.RunKubelets(ctx, kc, 100*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	deps := kc.AppsV1().Deployments("kube-system")
	dss := kc.AppsV1().DaemonSets("kube-system")
	waitFor(t, "Talos' boot-time apply of CoreDNS and kube-proxy", func() bool {
		_, err1 := deps.Get(ctx, "coredns", metav1.GetOptions{})
		_, err2 := dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
		_, err3 := kc.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
		return err1 == nil && err2 == nil && err3 == nil
	}, func() string { return fmt.Sprint(h.f.Sim.SyncKubelets(ctx, kc)) })
	svc, err := kc.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if err != nil || svc.Spec.ClusterIP != "10.96.0.10" {
		t.Fatalf("kube-dns: %v %v; want the pinned 10.96.0.10", svc, err)
	}
	const oldDNS = "registry.k8s.io/coredns/coredns:v1.11.1"
	dep, err := deps.Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Spec.Containers[0].Image = oldDNS
	if _, err := deps.Update(ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}

	p := h.planner()
	p.Kube = kc
	plan, err := p.Plan(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Kubernetes == nil || plan.Kubernetes.Refused != "" {
		t.Fatalf("no Kubernetes change planned: %+v", plan.Kubernetes)
	}
	dry := strings.Join(plan.Kubernetes.Manifests, "\n")
	for _, want := range []string{
		"would be configured apps/v1 Deployment kube-system/coredns (coredns: " + oldDNS + " → registry.k8s.io/coredns/coredns:v1.12.2)",
		"objects of cp-1's manifests unchanged",
	} {
		if !strings.Contains(dry, want) {
			t.Errorf("the plan's dry run lacks %q:\n%s", want, dry)
		}
	}
	if dep, _ := deps.Get(ctx, "coredns", metav1.GetOptions{}); dep.Spec.Template.Spec.Containers[0].Image != oldDNS {
		t.Fatalf("the dry run changed CoreDNS: %s", dep.Spec.Template.Spec.Containers[0].Image)
	}

	r := h.rollout(nil)
	r.Kube, r.Wait = kc, 30*time.Second
	out := r.Run(ctx, plan)
	log := strings.Join(h.lines, "\n")
	if !out.Done() || len(out.Converged) != 5 || len(out.Partial) != 0 {
		t.Fatalf("rollout: %+v\n%s", out, log)
	}
	for _, want := range []string{
		"==> bootstrap manifests: server-side apply as talosctl upgrade-k8s (field manager talos)",
		"configured apps/v1 Deployment kube-system/coredns (coredns: " + oldDNS + " → registry.k8s.io/coredns/coredns:v1.12.2)",
		"configured apps/v1 DaemonSet kube-system/kube-proxy (kube-proxy: registry.k8s.io/kube-proxy:v1.33.5 → registry.k8s.io/kube-proxy:v1.34.1)",
		"Deployment kube-system/coredns rolled out",
		"DaemonSet kube-system/kube-proxy rolled out",
	} {
		if !strings.Contains(log, want) {
			t.Errorf("the rollout does not say %q:\n%s", want, log)
		}
	}
	// the last step came after every component moved
	if i, j := strings.LastIndex(log, "==> worker-2"), strings.Index(log, "==> bootstrap manifests"); i < 0 || j < i {
		t.Errorf("manifests synced before the last kubelet moved:\n%s", log)
	}

	// what the API server holds is the target's manifest, owned by "talos"
	c, err := h.f.Dialer.Client(ctx, h.f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	objs, err := reconcile.BootstrapManifests(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, o := range objs {
		if cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers"); len(cs) > 0 {
			want[o.GetKind()], _ = cs[0].(map[string]any)["image"].(string)
		}
	}
	if want["Deployment"] != "registry.k8s.io/coredns/coredns:v1.12.2" || want["DaemonSet"] != "registry.k8s.io/kube-proxy:v1.34.1" {
		t.Fatalf("cp-1's manifests after the upgrade: %v", want)
	}
	dep, err = deps.Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != want["Deployment"] {
		t.Errorf("CoreDNS runs %s, want the manifest's %s", got, want["Deployment"])
	}
	if got := ds.Spec.Template.Spec.Containers[0].Image; got != want["DaemonSet"] {
		t.Errorf("kube-proxy runs %s, want the manifest's %s", got, want["DaemonSet"])
	}
	imageOwner := func(mf []metav1.ManagedFieldsEntry) []string {
		var out []string
		for _, m := range mf {
			if m.FieldsV1 != nil && strings.Contains(m.FieldsV1.GetRawString(), `"f:image"`) {
				out = append(out, m.Manager+"/"+string(m.Operation))
			}
		}
		return out
	}
	if got := imageOwner(dep.ManagedFields); !slices.Equal(got, []string{"talos/Apply"}) {
		t.Errorf("CoreDNS' image is managed by %v, want talos/Apply alone", got)
	}
	if got := imageOwner(ds.ManagedFields); !slices.Equal(got, []string{"talos/Apply"}) {
		t.Errorf("kube-proxy's image is managed by %v, want talos/Apply alone", got)
	}

	again, err := reconcile.SyncManifests(ctx, kc, objs, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, ch := range again {
		if ch.Action != "unchanged" {
			t.Errorf("a second sync changed %s", ch)
		}
	}
	if len(again) != len(objs) || len(objs) != 16 {
		t.Errorf("%d objects synced of %d; want the 16 of the token, CSR, kubeconfig, node RBAC, CoreDNS and kube-proxy manifests", len(again), len(objs))
	}

	// the rollout noted the sync due before its first move and removed the
	// note once it synced
	if !strings.Contains(log, "noted on the kube-system Namespace ("+reconcile.ManifestsDueAnnotation+": v1.34.1)") {
		t.Errorf("the rollout did not say its note:\n%s", log)
	}
	if i, j := strings.Index(log, "noted on the kube-system Namespace"), strings.Index(log, "==> cp-1: apply"); i < 0 || j < i {
		t.Errorf("the note was written after the first move:\n%s", log)
	}
	note := func() string {
		ns, err := kc.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return ns.Annotations[reconcile.ManifestsDueAnnotation]
	}
	if got := note(); got != "" {
		t.Errorf("the note stays after the rollout's sync: %q", got)
	}

	// an apply with nothing to change: no note, an operator's edit stays;
	// a note another run left (it stopped before the sync), synced
	setDNS := func(image string) {
		// the sim's kubelets write the Deployment's status: retry on a conflict
		if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			dep, err := deps.Get(ctx, "coredns", metav1.GetOptions{})
			if err != nil {
				return err
			}
			dep.Spec.Template.Spec.Containers[0].Image = image
			_, err = deps.Update(ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	setDNS(oldDNS)
	h.lines = nil
	r = h.rollout(nil)
	r.Kube, r.Wait = kc, 30*time.Second
	if err := r.SyncDueManifests(ctx); err != nil || len(h.lines) > 0 {
		t.Fatalf("with no note: %v, said %q", err, h.lines)
	}
	if dep, _ := deps.Get(ctx, "coredns", metav1.GetOptions{}); dep.Spec.Template.Spec.Containers[0].Image != oldDNS {
		t.Fatalf("with no note, CoreDNS was synced over an operator's edit: %s", dep.Spec.Template.Spec.Containers[0].Image)
	}
	patch := `{"metadata":{"annotations":{"` + reconcile.ManifestsDueAnnotation + `":"v1.34.1"}}}`
	if _, err := kc.CoreV1().Namespaces().Patch(ctx, "kube-system", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.SyncDueManifests(ctx); err != nil {
		t.Fatalf("a due sync: %v\n%s", err, strings.Join(h.lines, "\n"))
	}
	if dep, _ := deps.Get(ctx, "coredns", metav1.GetOptions{}); dep.Spec.Template.Spec.Containers[0].Image != want["Deployment"] {
		t.Errorf("a due sync left CoreDNS at %s, want %s\n%s", dep.Spec.Template.Spec.Containers[0].Image, want["Deployment"], strings.Join(h.lines, "\n"))
	}
	if got := note(); got != "" {
		t.Errorf("the note stays after a due sync: %q", got)
	}
}

// waitFor polls cond for up to 30 seconds; saw says what stands in the way.
func waitFor(t *testing.T, what string, cond func() bool, saw func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s: %s", what, saw())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
