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

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// With a CNI running, a rebooted worker's Node is NotReady until its
// cilium agent runs again (the sim follows the kubelet's ReadyCondition:
// sim/doc.go). A rolling apply of rebooting changes to two workers with
// MaxUnavailable 1 must wait for the first worker's Node before it reboots
// the second: a poller reads every Node through the real API server during
// the rollout and fails the test if two were ever NotReady at once. It
// also has to see each worker's Node NotReady at some point, or the test
// could not have failed.
func TestRollingRebootWaitsForTheNodeWhileACNIRuns(t *testing.T) {
	h := newHarness(t)
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: h.f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := sim.InstallCilium(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	kubelets := make(chan struct{})
	go func() {
		defer close(kubelets)
		h.f.Sim.RunKubelets(ctx, kc, 50*time.Millisecond)
	}()
	defer func() { cancel(); <-kubelets }()

	notReady := func() ([]string, error) {
		nodes, err := kc.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for i := range nodes.Items {
			if !talosapi.NodeFactsOf(&nodes.Items[i]).Ready {
				out = append(out, nodes.Items[i].Name)
			}
		}
		if len(nodes.Items) != 5 {
			return out, fmt.Errorf("%d Nodes, want 5", len(nodes.Items))
		}
		return out, nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		nr, err := notReady()
		if err == nil && len(nr) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Nodes not all Ready with Cilium running: %v %v", nr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	h.f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	h.f.Drift(t, "worker-2", "time.cloudflare.com", "pool.ntp.org")
	p := h.planner()
	p.Mode = talosapi.ModeReboot
	plan, err := p.Plan(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(plan.Pending()); n != 2 {
		t.Fatalf("%d actions, want 2: %v", n, plan.Actions)
	}

	var (
		mu   sync.Mutex
		most []string
		seen = map[string]bool{}
		errs []error
	)
	stop := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for {
			nr, err := notReady()
			mu.Lock()
			if err != nil {
				errs = append(errs, err)
			}
			for _, n := range nr {
				seen[n] = true
			}
			if len(nr) > len(most) {
				most = nr
			}
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	r := h.rollout(nil)
	r.Kube, r.Wait = kc, 30*time.Second
	out := r.Run(ctx, plan)
	close(stop)
	<-polled
	log := strings.Join(h.lines, "\n")
	if !out.Done() || len(out.Converged) != 2 {
		t.Fatalf("rollout: %+v\n%s", out, log)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) > 0 {
		t.Errorf("polling the Nodes: %v", errs[0])
	}
	if len(most) > 1 {
		t.Errorf("Nodes %v were NotReady at once during a rollout with MaxUnavailable 1\n%s", most, log)
	}
	for _, w := range []string{"worker-1", "worker-2"} {
		if !seen[w] {
			t.Errorf("never saw %s's Node NotReady through its reboot: the poll proves nothing", w)
		}
	}
	t.Log(log)
	if strings.Contains(log, "not ready only because its Node is not") {
		t.Errorf("the rollout accepted a NotReady Node while a CNI runs:\n%s", log)
	}
	if nr, err := notReady(); err != nil || len(nr) > 0 {
		t.Errorf("after the rollout Nodes %v are NotReady (%v)", slices.Sorted(slices.Values(nr)), err)
	}
}
