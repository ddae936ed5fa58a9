package reconcile_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	appsv1client "k8s.io/client-go/kubernetes/typed/apps/v1"
	"k8s.io/client-go/util/retry"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
)

// The loop ends a Kubernetes upgrade it made as devata apply ends one
// (talosctl upgrade-k8s' PerformManifestsSync, talos_managed.go Upgrade):
// once every machine of the fleet runs the new version, the bootstrap
// manifests a control plane renders are server-side applied to the real
// API server. The 3+2 fleet runs v1.33.5 with kube-proxy, its CoreDNS at
// an older image; the inventory says v1.34.1. The loop's passes move the
// components machine by machine (one machine's plan at a time), and a
// watcher polling the API server never sees the kube-proxy DaemonSet on
// v1.34.1 while a Node still reports an older kubelet: the sync comes after
// the last kubelet, not after the first machine that finished. In the end
// CoreDNS and kube-proxy run the manifests' images, and a pass over the
// converged fleet syncs nothing again.
func TestLoopSyncsBootstrapManifestsAfterAKubernetesUpgrade(t *testing.T) {
	k := startKubeUpgrade(t)
	ctx, kc, f, deps, dss, wg := k.ctx, k.kc, k.f, k.deps, k.dss, &k.wg
	const oldDNS, newDNS = oldCoreDNS, newCoreDNS
	k.setCoreDNS(t, oldDNS)

	// the watcher: kube-proxy's image against every Node's kubelet
	var (
		mu     sync.Mutex
		early  []string
		synced bool
	)
	wg.Go(func() {
		for ctx.Err() == nil {
			ds, err1 := dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
			nodes, err2 := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			if err1 == nil && err2 == nil && strings.HasSuffix(ds.Spec.Template.Spec.Containers[0].Image, ":v1.34.1") {
				mu.Lock()
				synced = true
				for _, n := range nodes.Items {
					if v := n.Status.NodeInfo.KubeletVersion; v != "v1.34.1" {
						early = append(early, fmt.Sprintf("kube-proxy on v1.34.1 while %s's kubelet is %s", n.Name, v))
					}
				}
				mu.Unlock()
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	h := newLoop(t, f)
	h.opts.Changes.Kube, h.opts.Changes.Wait = kc, 30*time.Second
	var passes, manifests []string
	for i := 0; i < 4; i++ {
		res := h.loop().Once(context.Background())
		passes = append(passes, fmt.Sprintf("pass %d: exit %d, %v %v, manifests %q %q", i+1, res.ExitCode(), res.Outcomes, res.Errors, res.Manifests, res.ManifestsErr))
		manifests = append(manifests, res.Manifests)
		if res.ExitCode() == 0 && len(res.Queued) == 0 {
			break
		}
	}
	// the first pass leaves machines part way: the sync waits, saying for whom
	if synced := slices.Index(manifests, "synced for Kubernetes v1.34.1"); synced < 1 || !strings.HasPrefix(manifests[0], "pending: ") ||
		slices.ContainsFunc(manifests[synced+1:], func(s string) bool { return s != "" }) {
		t.Errorf("the passes' manifests: %q; want pending first, then synced once\n%s", manifests, strings.Join(passes, "\n"))
	}
	mu.Lock()
	gotSynced, gotEarly := synced, early
	mu.Unlock()
	logs := h.logs.String()
	if !gotSynced {
		t.Fatalf("kube-proxy never ran v1.34.1: the manifests were not synced\n%s\n%s", strings.Join(passes, "\n"), logs)
	}
	if len(gotEarly) > 0 {
		t.Errorf("the manifests were synced before every kubelet moved:\n%s", strings.Join(gotEarly[:min(len(gotEarly), 5)], "\n"))
	}
	if n := strings.Count(logs, "bootstrap manifests: server-side apply"); n != 1 {
		t.Errorf("the manifests were synced %d times, want once, after the last machine\n%s", n, logs)
	}
	// each machine pulled its new kubelet image before its change, as
	// apply's rollout does (Rollout.prePull; talosctl upgrade-k8s' prePullImages)
	for _, m := range f.Sim.Machines() {
		if !slices.ContainsFunc(m.ImagePulls(), func(p sim.ImagePull) bool {
			return p.Image == "ghcr.io/siderolabs/kubelet:v1.34.1" && p.Namespace == "system"
		}) {
			t.Errorf("%s never pulled kubelet v1.34.1 before its change: %+v", m.Name(), m.ImagePulls())
		}
	}
	dep, err := deps.Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != newDNS {
		t.Errorf("CoreDNS runs %s, want the manifest's %s", got, newDNS)
	}

	// a later pass over the converged fleet queues nothing and syncs nothing
	res := h.loop().Once(context.Background())
	if len(res.Queued) > 0 || res.ExitCode() != 0 {
		t.Errorf("a pass after the upgrade queued %v (exit %d)", res.Queued, res.ExitCode())
	}
	if n := strings.Count(h.logs.String(), "bootstrap manifests: server-side apply"); n != 1 {
		t.Errorf("a pass over the converged fleet synced the manifests again (%d syncs)", n)
	}
}

// The CoreDNS images of the Kubernetes upgrade fixture: one older than
// the manifests', and the manifests' at v1.34.1 (Talos' CoreDNSImage).
const oldCoreDNS, newCoreDNS = "registry.k8s.io/coredns/coredns:v1.11.1", "registry.k8s.io/coredns/coredns:v1.12.2"

// kubeUpgrade is the Kubernetes upgrade fixture the loop's tests share: a
// real API server with the inventory's service range, and a 3+2 fleet on
// v1.33.5 with kube-proxy enabled whose inventory says v1.34.1, its
// kubelets run by the sim, and Talos' boot-time apply of CoreDNS and
// kube-proxy done.
type kubeUpgrade struct {
	ctx  context.Context
	kc   *kubernetes.Clientset
	f    *simtest.Fleet
	deps appsv1client.DeploymentInterface
	dss  appsv1client.DaemonSetInterface
	wg   sync.WaitGroup
	env  *testenv.Env
}

func startKubeUpgrade(t *testing.T) *kubeUpgrade {
	t.Helper()
	env := testenv.StartWith(t, testenv.Options{APIServerArgs: map[string]string{"service-cluster-ip-range": "10.96.0.0/12"}})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f := simtest.Start(t, simtest.Options{Bootstrap: true, KubernetesVersion: "v1.33.5", RestartDelay: 100 * time.Millisecond,
		EditInventory: func(s string) string {
			s = strings.Replace(s, "kubeProxy: false", "kubeProxy: true", 1)
			return strings.Replace(s, "kubeProxyReplacement: true", "kubeProxyReplacement: false", 1)
		}})
	ctx, cancel := context.WithCancel(context.Background())
	k := &kubeUpgrade{ctx: ctx, kc: kc, f: f, env: env, deps: kc.AppsV1().Deployments("kube-system"), dss: kc.AppsV1().DaemonSets("kube-system")}
	k.wg.Go(func() { f.Sim.RunKubelets(ctx, kc, 100*time.Millisecond) })
	t.Cleanup(func() { cancel(); k.wg.Wait() })
	waitFor(t, "Talos' boot-time apply of CoreDNS and kube-proxy", func() bool {
		_, err1 := k.deps.Get(ctx, "coredns", metav1.GetOptions{})
		_, err2 := k.dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
		return err1 == nil && err2 == nil
	}, func() string { return fmt.Sprint(f.Sim.SyncKubelets(ctx, kc)) })
	return k
}

// setCoreDNS sets the CoreDNS Deployment's image as an operator's kubectl
// edit would (the sim's kubelets write its status: retried on a conflict).
func (k *kubeUpgrade) setCoreDNS(t *testing.T, image string) {
	t.Helper()
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep, err := k.deps.Get(k.ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		dep.Spec.Template.Spec.Containers[0].Image = image
		_, err = k.deps.Update(k.ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// coreDNS is the image the CoreDNS Deployment runs.
func (k *kubeUpgrade) coreDNS(t *testing.T) string {
	t.Helper()
	dep, err := k.deps.Get(k.ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return dep.Spec.Template.Spec.Containers[0].Image
}

// note is the kube-system Namespace's note of due bootstrap manifests.
func (k *kubeUpgrade) note(t *testing.T) string {
	t.Helper()
	ns, err := k.kc.CoreV1().Namespaces().Get(k.ctx, "kube-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Annotations[reconcile.ManifestsDueAnnotation]
}

// kubeletsAt reports whether every Node reports kubelet version.
func (k *kubeUpgrade) kubeletsAt(version string) bool {
	nodes, err := k.kc.CoreV1().Nodes().List(k.ctx, metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		return false
	}
	for _, n := range nodes.Items {
		if n.Status.NodeInfo.KubeletVersion != version {
			return false
		}
	}
	return true
}

// The note that the bootstrap manifests are due outlives the loop that
// wrote it. The first loop makes the whole v1.33.5 → v1.34.1 change, and
// loses its lead once every Node reports the new kubelet: it never syncs.
// Its first move pulled the new images on every machine before any config
// changed (talosctl upgrade-k8s' prePullImages: the workers' kubelets
// too, though they move a pass later), and left the note on the
// kube-system Namespace. A new loop (a restart) finds the note, syncs
// CoreDNS to the manifest's image between a started and a converged
// audit record of the cluster, and removes the note. Then an operator
// edits CoreDNS: with no note, passes leave the edit alone.
func TestLoopManifestsNoteOutlivesARestart(t *testing.T) {
	k := startKubeUpgrade(t)
	k.setCoreDNS(t, oldCoreDNS)

	h := newLoop(t, k.f)
	h.opts.Changes.Kube, h.opts.Changes.Wait = k.kc, 30*time.Second
	// asked before every write: the last kubelet's change goes, the sync does not
	h.opts.Leading = func() bool { return !k.kubeletsAt("v1.34.1") }
	var passes []string
	for i := 0; i < 4; i++ {
		res := h.loop().Once(context.Background())
		passes = append(passes, fmt.Sprintf("pass %d: exit %d, %v %v, manifests %q %q", i+1, res.ExitCode(), res.Outcomes, res.Errors, res.Manifests, res.ManifestsErr))
		if len(res.Queued) == 0 {
			break
		}
	}
	if !k.kubeletsAt("v1.34.1") {
		t.Fatalf("the first loop did not move every kubelet:\n%s\n%s", strings.Join(passes, "\n"), h.logs)
	}
	if got := k.note(t); got != "v1.34.1" {
		t.Fatalf("the kube-system Namespace's note is %q after the moves, want v1.34.1\n%s", got, h.logs)
	}
	if got := k.coreDNS(t); got != oldCoreDNS || strings.Contains(h.logs.String(), "server-side apply") {
		t.Fatalf("the first loop synced (CoreDNS %s) though it no longer leads\n%s", got, h.logs)
	}

	// every machine pulled its new images before the fleet's first apply
	for _, m := range k.f.Sim.Machines() {
		want := []string{"ghcr.io/siderolabs/kubelet:v1.34.1"}
		if strings.HasPrefix(m.Name(), "cp-") {
			want = append(want, "registry.k8s.io/kube-apiserver:v1.34.1", "registry.k8s.io/kube-controller-manager:v1.34.1", "registry.k8s.io/kube-scheduler:v1.34.1")
		}
		for _, img := range want {
			if !slices.ContainsFunc(m.ImagePulls(), func(p sim.ImagePull) bool { return p.Image == img && p.AppliesBefore == 0 }) {
				t.Errorf("%s did not pull %s before the first config was applied: %+v", m.Name(), img, m.ImagePulls())
			}
		}
	}
	if !strings.Contains(h.logs.String(), "the first move toward Kubernetes v1.34.1") {
		t.Errorf("the first move's pulls were not said:\n%s", h.logs)
	}

	// the restart
	h.renew()
	h.opts.Leading = nil
	res := h.loop().Once(context.Background())
	if res.Manifests != "synced for Kubernetes v1.34.1" || res.ManifestsErr != "" || res.ExitCode() != 0 {
		t.Fatalf("the restarted loop's pass: manifests %q %q, exit %d, queued %v\n%s", res.Manifests, res.ManifestsErr, res.ExitCode(), res.Queued, h.logs)
	}
	if got := k.coreDNS(t); got != newCoreDNS {
		t.Errorf("CoreDNS runs %s after the restarted loop's sync, want the manifest's %s", got, newCoreDNS)
	}
	if got := k.note(t); got != "" {
		t.Errorf("the note stays after the sync: %q", got)
	}
	var syncs []reconcile.AuditRecord
	for _, r := range h.audit.records(t) {
		if r.Action == reconcile.ActionSyncManifests {
			syncs = append(syncs, r)
		}
	}
	if len(syncs) != 2 || syncs[0].Result != reconcile.ResultStarted || syncs[1].Result != reconcile.ResultConverged {
		t.Fatalf("the sync's audit records: %+v; want started, then converged", syncs)
	}
	for _, r := range syncs {
		if r.Machine != "" || r.Kubernetes != "v1.34.1" || r.Error != "" || r.InventorySHA256 == "" {
			t.Errorf("audit record %+v: want the cluster's (no machine), Kubernetes v1.34.1, no error, the inventory's hash", r)
		}
	}
	if !slices.Contains(syncs[1].Objects, "configured apps/v1 Deployment kube-system/coredns") || slices.ContainsFunc(syncs[1].Objects, func(o string) bool {
		return strings.Contains(o, "unchanged") || strings.Contains(o, "image")
	}) {
		t.Errorf("the converged record's objects %q: want the changed ones by name (coredns configured), nothing unchanged, no content", syncs[1].Objects)
	}

	// docs/reconcile.md's audit section shows these records' fields, in order
	doc, err := os.ReadFile("../docs/reconcile.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n## Audit log\n")
	blocks := regexp.MustCompile("(?s)```json\n(.*?)```").FindAllStringSubmatch(section, -1)
	if len(blocks) < 2 {
		t.Fatal("docs/reconcile.md's audit section has no second ```json block (the sync's records)")
	}
	written := slices.Collect(strings.Lines(h.audit.String()))
	var lines []string
	for _, l := range written {
		if strings.Contains(l, `"action":"sync-bootstrap-manifests"`) {
			lines = append(lines, l)
		}
	}
	// the inventory here is not in Git: no commit to name
	noCommit := func(keys []string) []string {
		return slices.DeleteFunc(keys, func(k string) bool { return k == "inventoryCommit" || k == "inventoryDirty" })
	}
	for i, line := range slices.Collect(strings.Lines(blocks[1][1])) {
		if i >= len(lines) {
			t.Errorf("the docs show %d sync records, the loop wrote %d", i+1, len(lines))
			break
		}
		if dk, gk := noCommit(jsonKeys(t, []byte(line))), jsonKeys(t, []byte(lines[i])); !slices.Equal(dk, gk) {
			t.Errorf("docs' sync record %d has fields %v, the loop writes %v", i+1, dk, gk)
		}
	}

	// with no note, an operator's own edit stays
	k.setCoreDNS(t, oldCoreDNS)
	for i := 0; i < 2; i++ {
		if res := h.loop().Once(context.Background()); res.Manifests != "" || res.ManifestsErr != "" || len(res.Queued) > 0 {
			t.Errorf("a pass with no note: manifests %q %q, queued %v", res.Manifests, res.ManifestsErr, res.Queued)
		}
	}
	if got := k.coreDNS(t); got != oldCoreDNS {
		t.Errorf("a pass with no note synced CoreDNS over the operator's edit: %s", got)
	}
	if n := strings.Count(h.logs.String(), "bootstrap manifests: server-side apply"); n != 1 {
		t.Errorf("the manifests were synced %d times, want once", n)
	}
}

// The loop's first move toward a version pulls on every machine that will
// move, as devata apply does, but not on a held one: the inventory holds
// worker-2, which is said and pulls nothing. The others pulled before the
// fleet's first config was applied, and the note was written.
func TestLoopFirstMoveSkipsHeldMachinesPulls(t *testing.T) {
	k := startKubeUpgrade(t)
	editInventory(t, k.f, "  - name: worker-2\n    role: worker\n", "  - name: worker-2\n    role: worker\n    hold: {reason: \"disk replacement, OPS-123\"}\n")
	h := newLoop(t, k.f)
	h.opts.Changes.Kube, h.opts.Changes.Wait = k.kc, 30*time.Second
	res := h.loop().Once(context.Background())
	if res.Outcomes["worker-2"] != reconcile.OutcomeHeld {
		t.Fatalf("worker-2: %s, want held\n%s", res.Outcomes["worker-2"], h.logs)
	}
	if !strings.Contains(h.logs.String(), "worker-2: held (hold): not pulled now; it pulls its images before its own change") {
		t.Errorf("the held machine's skipped pull was not said:\n%s", h.logs)
	}
	for _, m := range k.f.Sim.Machines() {
		pulls := m.ImagePulls()
		if m.Name() == "worker-2" {
			if len(pulls) > 0 {
				t.Errorf("held worker-2 pulled %+v", pulls)
			}
			continue
		}
		if !slices.ContainsFunc(pulls, func(p sim.ImagePull) bool {
			return p.Image == "ghcr.io/siderolabs/kubelet:v1.34.1" && p.AppliesBefore == 0
		}) {
			t.Errorf("%s did not pull its kubelet before the first config was applied: %+v", m.Name(), pulls)
		}
	}
	if got := k.note(t); got != "v1.34.1" {
		t.Errorf("the note after the first move: %q, want v1.34.1", got)
	}
}

// A loop whose Kubernetes identity may do everything but patch the
// kube-system Namespace (the API server answers Forbidden) cannot write
// the note: it keeps it in memory, says once that a restart before the
// sync loses it, and still syncs CoreDNS once every machine moved.
func TestLoopManifestsNoteForbiddenKeptInMemory(t *testing.T) {
	k := startKubeUpgrade(t)
	k.setCoreDNS(t, oldCoreDNS)
	limited := k.limitedUser(t)

	h := newLoop(t, k.f)
	h.opts.Changes.Kube, h.opts.Changes.Wait = limited, 30*time.Second
	var manifests []string
	for i := 0; i < 4; i++ {
		res := h.loop().Once(context.Background())
		manifests = append(manifests, res.Manifests+res.ManifestsErr)
		if len(res.Queued) == 0 {
			break
		}
	}
	logs := h.logs.String()
	if n := strings.Count(logs, "could not be written on the kube-system Namespace"); n != 1 {
		t.Errorf("the fallback was said %d times, want once:\n%s", n, logs)
	}
	for _, want := range []string{`cannot patch resource \"namespaces\"`, "kept in memory only, so a restart before the sync forgets it"} {
		if !strings.Contains(logs, want) {
			t.Errorf("the fallback does not say %q:\n%s", want, logs)
		}
	}
	if got := k.note(t); got != "" {
		t.Errorf("a Forbidden patch wrote the note: %q", got)
	}
	if !slices.Contains(manifests, "synced for Kubernetes v1.34.1") {
		t.Errorf("the passes' manifests: %q; want synced by the note in memory\n%s", manifests, logs)
	}
	if got := k.coreDNS(t); got != newCoreDNS {
		t.Errorf("CoreDNS runs %s, want the manifest's %s", got, newCoreDNS)
	}
}

// limitedUser is a client of a user who may do everything but write
// Namespaces: every resource of every API group, and of the core group
// every one (subresources too) but namespaces, which it may read.
func (k *kubeUpgrade) limitedUser(t *testing.T) *kubernetes.Clientset {
	t.Helper()
	groups, err := k.kc.Discovery().ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	var named []string
	for _, g := range groups.Groups {
		if g.Name != "" {
			named = append(named, g.Name)
		}
	}
	core, err := k.kc.Discovery().ServerResourcesForGroupVersion("v1")
	if err != nil {
		t.Fatal(err)
	}
	var coreResources []string
	for _, r := range core.APIResources {
		if r.Name != "namespaces" && !strings.HasPrefix(r.Name, "namespaces/") {
			coreResources = append(coreResources, r.Name)
		}
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "devata-no-namespace-writes"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: named, Resources: []string{"*"}, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: coreResources, Verbs: []string{"*"}},
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{NonResourceURLs: []string{"*"}, Verbs: []string{"get"}},
	}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "devata-limited"}}}
	if _, err := k.kc.RbacV1().ClusterRoles().Create(k.ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.kc.RbacV1().ClusterRoleBindings().Create(k.ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := k.env.User("devata-limited")
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the limited user's role to take effect", func() bool {
		_, err := c.CoreV1().Nodes().List(k.ctx, metav1.ListOptions{})
		return err == nil
	}, func() string { return "nodes still forbidden" })
	return c
}
