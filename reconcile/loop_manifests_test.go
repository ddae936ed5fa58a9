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
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
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
	var wg sync.WaitGroup
	wg.Go(func() { f.Sim.RunKubelets(ctx, kc, 100*time.Millisecond) })
	t.Cleanup(func() { cancel(); wg.Wait() })

	deps, dss := kc.AppsV1().Deployments("kube-system"), kc.AppsV1().DaemonSets("kube-system")
	waitFor(t, "Talos' boot-time apply of CoreDNS and kube-proxy", func() bool {
		_, err1 := deps.Get(ctx, "coredns", metav1.GetOptions{})
		_, err2 := dss.Get(ctx, "kube-proxy", metav1.GetOptions{})
		return err1 == nil && err2 == nil
	}, func() string { return fmt.Sprint(f.Sim.SyncKubelets(ctx, kc)) })
	const oldDNS, newDNS = "registry.k8s.io/coredns/coredns:v1.11.1", "registry.k8s.io/coredns/coredns:v1.12.2"
	// the sim's kubelets write the Deployment's status: retry on a conflict
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep, err := deps.Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		dep.Spec.Template.Spec.Containers[0].Image = oldDNS
		_, err = deps.Update(ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

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
