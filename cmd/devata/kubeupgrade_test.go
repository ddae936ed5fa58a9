package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blang/semver/v4"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// moveWatch polls what every simulated machine's Kubernetes components run
// while a rollout goes, notes when each (machine, component) was first seen
// on the new version, and records every moment at which a kubelet ran a
// newer version than some kube-apiserver, or a controller-manager or
// scheduler a newer one than its own machine's kube-apiserver: what
// Kubernetes' version skew policy forbids.
type moveWatch struct {
	to     semver.Version
	mu     sync.Mutex
	first  map[string]int // "machine/component" → sample index when first seen on to
	broken []string
	n      int
}

func watchMoves(t *testing.T, f *sim.Fleet, to string) *moveWatch {
	t.Helper()
	w := &moveWatch{to: semver.MustParse(strings.TrimPrefix(to, "v")), first: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			w.sample(f)
			time.Sleep(5 * time.Millisecond)
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return w
}

func (w *moveWatch) sample(f *sim.Fleet) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n++
	var apiservers []semver.Version
	runs := map[string]map[string]semver.Version{}
	for _, m := range f.Machines() {
		runs[m.Name()] = map[string]semver.Version{}
		for c, img := range m.Observe().Images {
			v, err := semver.ParseTolerant(talosapi.ImageTag(img))
			if err != nil {
				continue
			}
			runs[m.Name()][c] = v
			if v.GTE(w.to) {
				if _, seen := w.first[m.Name()+"/"+c]; !seen {
					w.first[m.Name()+"/"+c] = w.n
				}
			}
			if c == talosapi.KubeAPIServer {
				apiservers = append(apiservers, v)
			}
		}
	}
	for name, cs := range runs {
		for c, v := range cs {
			switch c {
			case talosapi.Kubelet:
				for _, a := range apiservers {
					if v.GT(a) {
						w.broken = append(w.broken, fmt.Sprintf("sample %d: %s kubelet %s newer than a kube-apiserver %s", w.n, name, v, a))
					}
				}
			case talosapi.KubeControllerManager, talosapi.KubeScheduler:
				if a, ok := cs[talosapi.KubeAPIServer]; ok && v.GT(a) {
					w.broken = append(w.broken, fmt.Sprintf("sample %d: %s %s %s newer than its kube-apiserver %s", w.n, name, c, v, a))
				}
			}
		}
	}
}

// order returns the (machine/component) moves in the order they were first
// seen, and the skew violations.
func (w *moveWatch) order() ([]string, []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, len(w.first))
	for k := range w.first {
		keys = append(keys, k)
	}
	slices.SortStableFunc(keys, func(a, b string) int { return w.first[a] - w.first[b] })
	return keys, slices.Clone(w.broken)
}

// nodeKubelets reads every Node's kubelet version through the real API server.
func (k *kube) nodeKubelets(t *testing.T) map[string]string {
	t.Helper()
	nodes, err := k.kc.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range nodes.Items {
		out[n.Name] = n.Status.NodeInfo.KubeletVersion
	}
	return out
}

// waitKubelets waits until every machine's Node reports version.
func (k *kube) waitKubelets(t *testing.T, version string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := k.nodeKubelets(t)
		n := 0
		for _, name := range allMachines {
			if got[name] == version {
				n++
			}
		}
		if n == len(allMachines) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Nodes' kubelets %v, want all %s", got, version)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startOnKubernetes serves the 3+2 fleet built, its configs on Kubernetes
// version, its kubelets registered with a real API server, and returns the
// --kubeconfig flag for it.
func startOnKubernetes(t *testing.T, version string) (*simFleet, *kube, string) {
	t.Helper()
	return startOnKubernetesWith(t, simtest.Options{KubernetesVersion: version})
}

// startOnKubernetesWith is startOnKubernetes for the fleet opts describe
// (another example, another Talos release): built and bootstrapped, its
// services restarting in 200ms, its kubelets on opts.KubernetesVersion.
func startOnKubernetesWith(t *testing.T, opts simtest.Options) (*simFleet, *kube, string) {
	t.Helper()
	opts.Bootstrap, opts.RestartDelay = true, 200*time.Millisecond
	sf := startSim(t, opts)
	k := startKubeWith(t, testenv.Options{APIServerArgs: kubeServiceRange})
	k.playKubelets(t, sf.Sim)
	k.waitKubelets(t, opts.KubernetesVersion)
	return sf, k, "--kubeconfig=" + k.env.Kubeconfig
}

// assertUpgradeOrder checks what w saw on the 3+2 fleet after a whole
// Kubernetes upgrade: each component of talosctl upgrade-k8s' order on
// cp-1, cp-2, cp-3, then the workers' kubelets (in either order), no
// kubelet ever newer than an API server, and one apply per component and
// control plane, one per worker.
func assertUpgradeOrder(t *testing.T, w *moveWatch, f *sim.Fleet) {
	t.Helper()
	time.Sleep(50 * time.Millisecond) // a last sample
	moves, broken := w.order()
	for _, b := range broken {
		t.Error(b)
	}
	var want []string
	for _, c := range talosapi.KubeOrder {
		for _, m := range []string{"cp-1", "cp-2", "cp-3"} {
			want = append(want, m+"/"+c)
		}
	}
	want = append(want, "worker-1/kubelet", "worker-2/kubelet")
	if len(moves) != len(want) || !slices.Equal(moves[:len(want)-2], want[:len(want)-2]) {
		t.Errorf("moves in the order\n  %v\nwant\n  %v", moves, want)
	}
	if applies, _ := writes(f); applies != 3*4+2 {
		t.Errorf("%d applies, want 14", applies)
	}
}

// A Kubernetes minor upgrade driven by the inventory: the 3+2 fleet runs
// v1.33.5, the inventory says v1.34.1. The dry run shows the steps in
// talosctl upgrade-k8s' order and writes nothing; apply moves
// kube-apiserver on each control plane, one at a time, then
// kube-controller-manager, kube-scheduler, then the kubelets (control
// planes first), never letting a kubelet run newer than an API server; the
// Nodes report v1.34.1 through the real API server; a second run has
// nothing to do.
func TestKubernetesUpgrade(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetes(t, "v1.33.5")

	r := devata(t, nil, "apply", "--dry-run", "--config", sf.settings, kubeconfig)
	show(t, r)
	dryRun := r.stdout
	lacks(t, "dry run", r.stdout,
		"kubernetes: v1.33.5 → v1.34.1 by devata apply, one component at a time",
		"1. kube-apiserver on cp-1, cp-2, cp-3, one at a time",
		"3. kube-scheduler on cp-1, cp-2, cp-3",
		"4. kubelet on cp-1, cp-2, cp-3, worker-1, worker-2; after each, its Node Ready on kubelet v1.34.1",
		"next: kube-apiserver on cp-1",
		"why: checked when this plan was made: no API v1.34.1 removes is requested",
		"kubernetes-image-pull cp-1, cp-2, cp-3",
		"by hand: talosctl --nodes "+sf.Inventory.Machine("cp-1").Address+" upgrade-k8s --to 1.34.1",
		"Kubernetes v1.33.5, one apply per component: kube-apiserver, kube-controller-manager, kube-scheduler, kubelet → v1.34.1",
	)
	if r.code != 1 {
		t.Fatalf("dry run: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Fatalf("the dry run applied %d configs", applies)
	}

	// devata plan shows the same steps, with the talosctl command that does them by hand
	r = devata(t, nil, "plan", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "plan", r.stdout,
		"kubernetes: v1.33.5 → v1.34.1 by devata apply, one component at a time",
		"     3. kube-scheduler on cp-1, cp-2, cp-3, one at a time; after each, its static pod Ready on the new image and etcd healthy\n     4. kubelet on cp-1, cp-2, cp-3, worker-1, worker-2; after each, its Node Ready on kubelet v1.34.1\n     next: kube-apiserver on cp-1\n",
		"by hand: talosctl --nodes "+sf.Inventory.Machine("cp-1").Address+" upgrade-k8s --to 1.34.1",
	)
	if r.code != 1 {
		t.Errorf("plan: exit %d, want 1 (pending)\n%s%s", r.code, r.stdout, r.err)
	}
	// one writer: apply's dry run prints devata plan's Kubernetes section
	if i, j := strings.Index(r.stdout, "kubernetes: v1.33.5"), strings.Index(r.stdout, "     next: "); i < 0 || j < i {
		t.Errorf("plan has no Kubernetes section\n%s", r.stdout)
	} else if section := r.stdout[i:j]; !strings.Contains(dryRun, section) {
		t.Errorf("apply --dry-run's Kubernetes section is not devata plan's:\n%s\napply's:\n%s", section, dryRun)
	}
	r = devata(t, nil, "plan", "-o", "markdown", "--config", sf.settings, kubeconfig)
	if !strings.Contains(r.stdout, "## Kubernetes v1.33.5 → v1.34.1\n") || !strings.Contains(r.stdout, "4. kubelet on cp-1, cp-2, cp-3, worker-1, worker-2\n") {
		t.Errorf("plan -o markdown lacks the Kubernetes section:\n%s", r.stdout)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Fatalf("plan applied %d configs", applies)
	}

	w := watchMoves(t, sf.Sim, "v1.34.1")
	before, _ := writes(sf.Sim)
	r = devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	assertPrePulled(t, sf.Sim, "v1.34.1", before)
	lacks(t, "apply", r.stdout, "pre-pulling the new Kubernetes images on 5 machines", "worker-1: pulled kubelet:v1.34.1",
		// the last step: CoreDNS (kube-proxy is off) and the manifests every
		// control plane renders (token, CSR, kubeconfig, node RBAC) as Talos
		// applied them at boot
		"==> bootstrap manifests: server-side apply as talosctl upgrade-k8s (field manager talos)",
		"13 objects of cp-1's manifests: 0 created, 0 configured, 13 unchanged")
	k.waitKubelets(t, "v1.34.1")
	assertUpgradeOrder(t, w, sf.Sim)
	if r := devata(t, nil, "drift", "--config", sf.settings, machineChecks); r.code != 0 {
		t.Errorf("drift after the upgrade: exit %d\n%s", r.code, r.stdout)
	}
	r = devata(t, nil, "apply", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to apply") {
		t.Errorf("second run: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
}

// A control plane left alone holds everything after the API servers: cp-3
// has a `--mode try` config pending (which no apply may cancel), so apply
// moves kube-apiserver on the two others only, leaves every kubelet where
// it is, skips the workers and exits 2; once the try has rolled back the
// next run finishes the upgrade from what the machines run.
func TestKubernetesUpgradeHeldByAControlPlane(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetes(t, "v1.33.5")

	ctx := context.Background()
	cp3 := sf.Inventory.Machine("cp-3")
	o := talosapi.Observe(ctx, sf.Dialer, cp3)
	if o.Err != nil || o.ConfigErr != nil {
		t.Fatal(o.Err, o.ConfigErr)
	}
	c, err := sf.Dialer.Client(ctx, cp3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tried := []byte(strings.Replace(string(o.Active), "time.cloudflare.com", "pool.ntp.org", 1))
	if _, err := talosapi.Apply(ctx, c, tried, talosapi.ModeTry, 8*time.Second); err != nil {
		t.Fatalf("try: %v", err)
	}

	w := watchMoves(t, sf.Sim, "v1.34.1")
	r := devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	lacks(t, "held apply", r.stdout,
		"2. kube-controller-manager: held: every kube-apiserver must run v1.34.1 before another component moves, and these do not yet: cp-3 (kube-apiserver v1.33.5: left alone: its active config is not the one it would boot",
		"changed part way (some Kubernetes components moved, the others wait): cp-1, cp-2",
		"worker-1, worker-2 (2 machines) skipped: left alone: its kubelet would move to v1.34.1; every kube-apiserver must run",
		"warning: its kubelet stays at v1.33.5: every kube-apiserver must run v1.34.1",
	)
	if r.code != 2 {
		t.Fatalf("held apply: exit %d, want 2 (cp-3 and the workers were skipped)\n%s%s", r.code, r.stdout, r.err)
	}
	moves, _ := w.order()
	if !slices.Equal(moves, []string{"cp-1/kube-apiserver", "cp-2/kube-apiserver"}) {
		t.Errorf("moves %v; want kube-apiserver on cp-1 and cp-2 only", moves)
	}
	if got := k.nodeKubelets(t); got["cp-1"] != "v1.33.5" || got["worker-1"] != "v1.33.5" {
		t.Errorf("kubelets %v; want all still v1.33.5", got)
	}

	// the try rolls back; then nothing holds the rest
	deadline := time.Now().Add(20 * time.Second)
	for o := talosapi.Observe(ctx, sf.Dialer, cp3); o.PendingConfig(); o = talosapi.Observe(ctx, sf.Dialer, cp3) {
		if time.Now().After(deadline) {
			t.Fatal("cp-3's try did not roll back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	r = devata(t, nil, "apply", "--yes", "--wait", "1m", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 || !strings.Contains(r.stdout, "Kubernetes v1.33.5, one apply per component: kube-controller-manager, kube-scheduler, kubelet → v1.34.1") {
		t.Fatalf("resumed apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	k.waitKubelets(t, "v1.34.1")
	if _, broken := w.order(); len(broken) > 0 {
		t.Errorf("version skew broken:\n%s", strings.Join(broken, "\n"))
	}
}

// Two minor releases at once are refused before anything is written, and
// say which version to go through; so is a version the machines' Talos
// does not run.
func TestKubernetesUpgradeRefused(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, KubernetesVersion: "v1.32.9"})
	r := devata(t, nil, "apply", "--yes", "--config", sf.settings)
	show(t, r)
	if r.code != 2 || !strings.Contains(r.stdout, "refused: a jump from v1.32.9 to v1.34.1: Kubernetes moves one minor release at a time") ||
		!strings.Contains(r.stdout, "set cluster.kubernetesVersion to the latest v1.33 patch") {
		t.Fatalf("jump: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Errorf("a refused upgrade applied %d configs", applies)
	}
}

// The reconcile loop plans one machine at a time: it looks at the control
// planes it does not plan, so the first pass moves kube-apiserver on the
// first two control planes it takes (the third still runs v1.33.5 when
// they are planned: the rest of theirs waits) and everything on the last;
// the workers, planned before any API server moved, wait (held). The
// second pass finishes the first two, then the workers' kubelets. No
// sample ever sees a kubelet newer than an API server. Each pass is a
// process of its own: the second syncs the bootstrap manifests by the
// note the first left on the kube-system Namespace.
func TestReconcileKubernetesUpgrade(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetes(t, "v1.33.5")

	w := watchMoves(t, sf.Sim, "v1.34.1")
	r := devata(t, nil, "reconcile", "--once", "--config", sf.settings, kubeconfig, loopChecks)
	show(t, r)
	if r.code != 1 {
		t.Fatalf("first pass: exit %d, want 1 (cp-1 and cp-2 part way)\n%s%s", r.code, r.stdout, r.err)
	}
	// the loop takes the control planes in its queue's order: the last of
	// them moves everything, the others their API servers only
	moves, _ := w.order()
	if len(moves) != 6 {
		t.Fatalf("first pass moved %v; want the three API servers, then the rest of one control plane", moves)
	}
	for _, m := range moves[:3] {
		if !strings.HasSuffix(m, "/"+talosapi.KubeAPIServer) {
			t.Errorf("first pass moved %v; want the three API servers first", moves)
		}
	}
	last, _, _ := strings.Cut(moves[3], "/")
	if !slices.Equal(moves[3:], []string{last + "/kube-controller-manager", last + "/kube-scheduler", last + "/kubelet"}) {
		t.Errorf("first pass moved %v; want the rest of %s in order", moves, last)
	}
	for _, m := range []string{"cp-1", "cp-2", "cp-3"} {
		want := "partial"
		if m == last {
			want = "converged"
		}
		if !strings.Contains(r.stdout, fmt.Sprintf("%-20s %s", m, want)) {
			t.Errorf("first pass: %s not %s", m, want)
		}
	}
	if !strings.Contains(r.stdout, "worker-1             held") {
		t.Error("first pass: worker-1 not held")
	}
	r = devata(t, nil, "reconcile", "--once", "--config", sf.settings, kubeconfig, loopChecks)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("second pass: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	k.waitKubelets(t, "v1.34.1")
	if _, broken := w.order(); len(broken) > 0 {
		t.Errorf("version skew broken:\n%s", strings.Join(broken, "\n"))
	}
	// a second process: the note the first left on the kube-system
	// Namespace says the bootstrap manifests are due
	if !strings.Contains(r.stdout, "bootstrap manifests: synced for Kubernetes v1.34.1") {
		t.Errorf("the second pass (another process) did not sync the bootstrap manifests:\n%s", r.stdout)
	}
}

// assertPrePulled checks talosctl upgrade-k8s' pre-pull
// (talos_managed.go prePullImages) on the sim: every control plane pulled
// kube-apiserver, kube-controller-manager and kube-scheduler at version
// into the CRI namespace (k8s.io), every machine the kubelet into the
// system namespace, each through MachineService.ImagePull, and every pull
// landed while the fleet had applied no more configs than before the
// rollout (applies): before the first component changed.
func assertPrePulled(t *testing.T, f *sim.Fleet, version string, applies int) {
	t.Helper()
	for _, m := range f.Machines() {
		want := map[string]string{"ghcr.io/siderolabs/kubelet:" + version: "system"}
		if strings.HasPrefix(m.Name(), "cp-") {
			for _, c := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
				want["registry.k8s.io/"+c+":"+version] = "k8s.io"
			}
		}
		got := map[string]string{}
		for _, p := range m.ImagePulls() {
			got[p.Image] = p.Namespace
			if p.AppliesBefore != applies {
				t.Errorf("%s pulled %s after %d applies; want it before the first component changed (%d applies)", m.Name(), p.Image, p.AppliesBefore, applies)
			}
		}
		for img, ns := range want {
			if got[img] != ns {
				t.Errorf("%s: %s pulled into %q, want %q (pulls: %v)", m.Name(), img, got[img], ns, got)
			}
		}
	}
}
