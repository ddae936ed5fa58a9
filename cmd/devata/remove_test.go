package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"devata.dev/devata/internal/golden"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// dropFromInventory deletes a machine's entry from the inventory file, as
// an operator does before devata remove.
func dropFromInventory(t *testing.T, dir, name string) {
	t.Helper()
	path := filepath.Join(dir, "inventory.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	entry := regexp.MustCompile(`(?ms)^  - name: ` + regexp.QuoteMeta(name) + `\n.*?(^  - name: |\z)`)
	out := entry.ReplaceAll(data, []byte("$1"))
	if len(out) == len(data) {
		t.Fatalf("no entry %s in %s", name, path)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// waitNode waits until Node name exists (want) or is gone (!want).
func (k *kube) waitNode(t *testing.T, name string, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := k.kc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		if (err == nil) == want {
			return
		}
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Node %s exists=%t after 30s", name, !want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (k *kube) pod(t *testing.T, ns, name, node string, mutate func(*corev1.Pod)) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := k.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"app": name}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}},
		},
	}
	if mutate != nil {
		mutate(p)
	}
	p, err := k.kc.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// what its kubelet would post once it runs: the Eviction API checks
	// budgets only for running pods (a Pending one is evicted at once)
	now := metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}
	if p, err = k.kc.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return p
}

// podState: "gone", "terminating" or "running" (no deletionTimestamp).
func (k *kube) podState(t *testing.T, p *corev1.Pod) string {
	t.Helper()
	got, err := k.kc.CoreV1().Pods(p.Namespace).Get(context.Background(), p.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) || (err == nil && got.UID != p.UID):
		return "gone"
	case err != nil:
		t.Fatal(err)
	case got.DeletionTimestamp != nil:
		return "terminating"
	}
	return "running"
}

// removeRules normalise a removal's output as fleetRules do, plus the test
// API server's address.
func removeRules(sf *simFleet, k *kube) []golden.Rule {
	return append([]golden.Rule{golden.Literal(k.env.Config.Host, "<kube-apiserver>")}, fleetRules(sf)...)
}

// A worker that is gone (it does not answer) and was deleted from the
// inventory: devata remove cordons and drains its Node through the
// Eviction API (a DaemonSet's pod stays), does not wait for pods no
// kubelet will stop, skips the reset, and deletes the Node. It refuses a
// machine still in the inventory, a dry run changes nothing, and a rerun
// finds nothing to do.
func TestRemoveGoneWorker(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	k.waitNode(t, "worker-2", true)

	web := k.pod(t, "apps", "web", "worker-2", nil)
	agent := k.pod(t, "apps", "agent", "worker-2", func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: "agent", UID: "0c6f3bde-0000-4000-8000-000000000001", Controller: &yes}}
	})
	other := k.pod(t, "apps", "other", "worker-1", nil)

	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "remove", "worker-2", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 2 || !strings.Contains(r.err, "worker-2 is in the inventory") || !strings.Contains(r.err, "delete its entry") {
		t.Fatalf("remove of a machine in the inventory: exit %d, want 2 and a refusal\n%s%s", r.code, r.stdout, r.err)
	}

	sf.Sim.Machine("worker-2").SetFaults(sim.Faults{Unreachable: true})
	dropFromInventory(t, sf.Dir, "worker-2")

	// web is a bare pod: evicting it deletes it for good
	r = devata(t, nil, "remove", "worker-2", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 2 || !strings.Contains(r.err, "Node worker-2 runs 1 pod no controller owns (apps/web)") || !strings.Contains(r.err, "--force") || !strings.Contains(r.err, "nothing was changed") {
		t.Fatalf("remove with a bare pod: exit %d, want 2 naming it and --force\n%s%s", r.code, r.stdout, r.err)
	}
	if node, err := k.kc.CoreV1().Nodes().Get(context.Background(), "worker-2", metav1.GetOptions{}); err != nil || node.Spec.Unschedulable {
		t.Errorf("the refused removal touched Node worker-2 (%v)", err)
	}

	r = devata(t, nil, "plan", "--config", sf.settings, kubeconfig)
	show(t, r)
	if !strings.Contains(r.stdout, "orphan: Node worker-2: no machine of the inventory has it") || !strings.Contains(r.stdout, "take it out with devata remove worker-2") {
		t.Errorf("plan does not list worker-2 as an orphan (exit %d):\n%s%s", r.code, r.stdout, r.err)
	}
	if strings.Contains(r.stdout, "orphan: Node worker-1") {
		t.Errorf("plan lists a machine of the inventory as an orphan:\n%s", r.stdout)
	}

	r = devata(t, nil, "remove", "worker-2", "--dry-run", "--force", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 1 {
		t.Fatalf("dry run: exit %d, want 1 (steps pending)\n%s%s", r.code, r.stdout, r.err)
	}
	assertGolden(t, "remove-dry-run.txt", r, 1, removeRules(sf, k))
	for _, want := range []string{"remove worker-2, a worker: 3 of 5 steps pending", "kubectl drain worker-2 --ignore-daemonsets", "the machine does not answer", "--force: 1 pod no controller owns will be deleted for good: apps/web", "dry run: nothing was changed"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("dry run lacks %q:\n%s", want, r.stdout)
		}
	}
	if st := k.podState(t, web); st != "running" {
		t.Errorf("after the dry run pod web is %s", st)
	}

	r = devata(t, nil, "remove", "worker-2", "--yes", "--force", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("remove: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	assertGolden(t, "remove.txt", r, 0, removeRules(sf, k))
	for _, want := range []string{"==> worker-2: cordon", "==> worker-2: drain", "1 pod evicted from worker-2", "==> worker-2: delete-node", "removed worker-2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("remove output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "==> worker-2: reset") {
		t.Errorf("remove reset a machine that does not answer:\n%s", r.stdout)
	}
	k.waitNode(t, "worker-2", false)
	if st := k.podState(t, web); st == "running" {
		t.Errorf("pod web on worker-2 was not evicted")
	}
	if st := k.podState(t, agent); st != "running" {
		t.Errorf("the DaemonSet's pod on worker-2 is %s; a drain leaves it", st)
	}
	if st := k.podState(t, other); st != "running" {
		t.Errorf("pod other on worker-1 is %s", st)
	}
	if n := sf.Sim.Machine("worker-2").Calls("Reset"); n != 0 {
		t.Errorf("worker-2 got %d Reset calls", n)
	}

	r = devata(t, nil, "remove", "worker-2", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 0 || !strings.Contains(r.stdout, "nothing to remove") {
		t.Errorf("rerun: exit %d, want 0 and nothing to remove\n%s%s", r.code, r.stdout, r.err)
	}
}

// A worker that runs: its pods are evicted and waited for (the sim's
// kubelet finishes them), a PodDisruptionBudget holds the drain until
// --wait and then nothing after the drain runs; once the budget allows,
// the rerun drains, resets the machine into maintenance mode and deletes
// its Node.
func TestRemoveRunningWorkerHonoursBudgets(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	k.waitNode(t, "worker-2", true)

	if _, err := k.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs, err := k.kc.AppsV1().ReplicaSets("apps").Create(context.Background(), &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"},
		Spec: appsv1.ReplicaSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web := k.pod(t, "apps", "web", "worker-2", func(p *corev1.Pod) {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: &yes}}
	})
	zero := intstr.FromInt32(0)
	pdb := &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps"},
		Spec:       policyv1.PodDisruptionBudgetSpec{MaxUnavailable: &zero, Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	if _, err := k.kc.PolicyV1().PodDisruptionBudgets("apps").Create(context.Background(), pdb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dropFromInventory(t, sf.Dir, "worker-2")
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "remove", "worker-2", "--yes", "--wait=3s", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 2 || !strings.Contains(r.err, "drain is blocked") || !strings.Contains(r.err, "apps/web") || !strings.Contains(r.err, "run devata remove worker-2 again") {
		t.Fatalf("remove against a budget: exit %d, want 2 naming the budget's pod and the rerun\n%s%s", r.code, r.stdout, r.err)
	}
	if st := k.podState(t, web); st != "running" {
		t.Errorf("pod web under its budget is %s", st)
	}
	if sf.Sim.Machine("worker-2").Calls("Reset") != 0 || !sf.Sim.Machine("worker-2").Configured() {
		t.Errorf("a blocked drain went on to the reset")
	}
	node, err := k.kc.CoreV1().Nodes().Get(context.Background(), "worker-2", metav1.GetOptions{})
	if err != nil || !node.Spec.Unschedulable {
		t.Errorf("worker-2 after the blocked drain: %v, unschedulable %t; want it cordoned", err, err == nil && node.Spec.Unschedulable)
	}

	if err := k.kc.PolicyV1().PodDisruptionBudgets("apps").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "remove", "worker-2", "--yes", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("rerun: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{"1 pod evicted from worker-2", "==> worker-2: reset", "worker-2 is back in maintenance mode", "removed worker-2"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("rerun output lacks %q:\n%s", want, r.stdout)
		}
	}
	if st := k.podState(t, web); st != "gone" {
		t.Errorf("pod web after the drain is %s, want gone", st)
	}
	if sf.Sim.Machine("worker-2").Configured() {
		t.Error("worker-2 is still configured after its reset")
	}
	k.waitNode(t, "worker-2", false)
}

// etcdMembers are the members cp-1 lists, by name.
func etcdMembers(t *testing.T, sf *simFleet) []string {
	t.Helper()
	cs := sf.Sim.EtcdClusters()
	if len(cs) != 1 {
		t.Fatalf("etcd clusters: %+v, want one", cs)
	}
	return append(cs[0].Members, cs[0].Learners...)
}

// A control plane deleted from the inventory: while a member that stays
// is down the quorum rule refuses before anything changes; once it is
// back, devata remove drains it, takes it out of etcd with
// EtcdLeaveCluster on the machine itself, resets it into maintenance mode
// and deletes its Node, and etcd keeps quorum throughout (a poller
// watches).
func TestRemoveControlPlane(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	k.waitNode(t, "cp-3", true)
	dropFromInventory(t, sf.Dir, "cp-3")
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "plan", "-o", "markdown", "--config", sf.settings, kubeconfig)
	if !strings.Contains(r.stdout, "## Orphans") || !regexp.MustCompile("- etcd member cp-3 \\(ID [0-9a-f]{16}\\) and Node: `devata remove cp-3`").MatchString(r.stdout) {
		t.Errorf("plan -o markdown does not list cp-3 as an orphan:\n%s%s", r.stdout, r.err)
	}

	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	r = devata(t, nil, "remove", "cp-3", "--yes", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 2 || !strings.Contains(r.err, "etcd cannot lose member cp-3 now") || !strings.Contains(r.err, "cp-2") || !strings.Contains(r.err, "nothing was changed") {
		t.Fatalf("remove while cp-2 is down: exit %d, want 2 and the quorum rule\n%s%s", r.code, r.stdout, r.err)
	}
	if node, err := k.kc.CoreV1().Nodes().Get(context.Background(), "cp-3", metav1.GetOptions{}); err != nil || node.Spec.Unschedulable {
		t.Errorf("the refused removal touched Node cp-3 (%v)", err)
	}
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{})

	// quorum throughout: two of three, then two of two, members healthy
	ctx, cancel := context.WithCancel(context.Background())
	lost := make(chan string, 1)
	go func() {
		for ctx.Err() == nil {
			cs := sf.Sim.EtcdClusters()
			healthy := 0
			for _, name := range []string{"cp-1", "cp-2"} {
				if sf.Sim.Machine(name).Running() {
					healthy++
				}
			}
			if len(cs) != 1 || healthy*2 <= len(cs[0].Members) {
				select {
				case lost <- fmt.Sprintf("%+v with %d healthy", cs, healthy):
				default:
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	r = devata(t, nil, "remove", "cp-3", "--yes", "--config", sf.settings, kubeconfig)
	cancel()
	show(t, r)
	if r.code != 0 {
		t.Fatalf("remove cp-3: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{"a control plane (etcd member", "==> cp-3: etcd-leave", "etcd members now: cp-1, cp-2", "==> cp-3: reset", "cp-3 is back in maintenance mode", "removed cp-3"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("remove output lacks %q:\n%s", want, r.stdout)
		}
	}
	select {
	case l := <-lost:
		t.Errorf("etcd lost quorum during the removal: %s", l)
	default:
	}
	if got := etcdMembers(t, sf); !slices.Equal(got, []string{"cp-1", "cp-2"}) {
		t.Errorf("etcd members after the removal: %v", got)
	}
	if sf.Sim.Machine("cp-3").Configured() {
		t.Error("cp-3 is still configured")
	}
	k.waitNode(t, "cp-3", false)
}

// A control plane that is gone: EtcdRemoveMemberByID through a member that
// stays; no reset. Then, with two members left, the next removal leaves
// one, and the last is never removed.
func TestRemoveGoneControlPlane(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	k := startKube(t)
	k.playKubelets(t, sf.Sim)
	k.waitNode(t, "cp-3", true)
	sf.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	dropFromInventory(t, sf.Dir, "cp-3")
	kubeconfig := "--kubeconfig=" + k.env.Kubeconfig

	r := devata(t, nil, "remove", "cp-3", "--yes", "--config", sf.settings, kubeconfig)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("remove cp-3: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	for _, want := range []string{"==> cp-3: etcd-remove-member", "etcd members now: cp-1, cp-2", "removed cp-3"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("remove output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "==> cp-3: reset") || sf.Sim.Machine("cp-3").Calls("Reset") != 0 {
		t.Errorf("a machine that does not answer was reset:\n%s", r.stdout)
	}
	if got := etcdMembers(t, sf); !slices.Equal(got, []string{"cp-1", "cp-2"}) {
		t.Errorf("etcd members: %v", got)
	}

	dropFromInventory(t, sf.Dir, "cp-2")
	r = devata(t, nil, "remove", "cp-2", "--yes", "--config", sf.settings, kubeconfig)
	if r.code != 0 {
		t.Fatalf("remove cp-2: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if got := etcdMembers(t, sf); !slices.Equal(got, []string{"cp-1"}) {
		t.Errorf("etcd members: %v", got)
	}
}
