package dnscheck_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks"
	"devata.dev/devata/checks/probe"
	"devata.dev/devata/dnscheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// probeBed is a simulated fleet with Cilium and CoreDNS running on a real
// kube-apiserver whose service range is the inventory's (kube-dns at
// 10.96.0.10, kubernetes at 10.96.0.1, as Talos has them).
type probeBed struct {
	fleet *simtest.Fleet
	kube  kubernetes.Interface
}

func startProbeBed(t *testing.T) *probeBed {
	t.Helper()
	f := simtest.Start(t, simtest.Options{Bootstrap: true, LoopbackNet: "127.77.39"})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kube, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	f.Sim.SyncKubelets(t.Context(), kube)
	f.Sim.SyncKubelets(t.Context(), kube)
	if err := sim.InstallCilium(t.Context(), env.Config); err != nil {
		t.Fatal(err)
	}
	b := &probeBed{fleet: f, kube: kube}
	b.settle(t)
	// the probe namespace as deploy/netcheck-probe.yaml makes it, and the
	// ServiceAccount kube-controller-manager would add
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: probe.DefaultNamespace}}
	if _, err := kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := kube.CoreV1().ServiceAccounts(ns.Name).Create(t.Context(), sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	return b
}

// settle runs kubelet rounds until the coredns check is InSync: agents,
// then CoreDNS pods Ready, then kube-dns' endpoints ready.
func (b *probeBed) settle(t *testing.T) {
	t.Helper()
	var rs []drift.Result
	for range 30 {
		b.fleet.Sim.SyncKubelets(t.Context(), b.kube)
		if rs = b.pass(t, dnscheck.CheckCoreDNS); rs[0].Status == drift.StatusInSync {
			return
		}
	}
	t.Fatalf("CoreDNS never settled: %s %q", rs[0].Status, rs[0].Reason)
}

// pass runs one drift pass of the named check with --probe, while the
// simulated kubelets run (they run the probe pods), and checks that no
// probe pod is left behind.
func (b *probeBed) pass(t *testing.T, check string) []drift.Result {
	t.Helper()
	ctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	if check == dnscheck.CheckProbe {
		go func() { defer close(done); b.fleet.Sim.RunKubelets(ctx, b.kube, 100*time.Millisecond) }()
	} else {
		close(done)
	}
	f := b.fleet
	fc := &checks.FleetCheck{Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer, Kube: b.kube, Checks: []string{check},
		Families: dnscheck.Checks(dnscheck.Options{Probe: &probe.Options{Timeout: 20 * time.Second}}), Concurrency: 4, Timeout: 10 * time.Second}
	rep, err := fc.Report(t.Context(), drift.Header{Cluster: "homelab"})
	stop()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	left, err := b.kube.CoreV1().Pods(probe.DefaultNamespace).List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Items) > 0 {
		t.Errorf("%d probe pods left behind, e.g. %s", len(left.Items), left.Items[0].Name)
	}
	return rep.Results
}

// probes runs coredns-probe and returns its result per machine: one each.
func (b *probeBed) probes(t *testing.T) map[string]drift.Result {
	t.Helper()
	out := map[string]drift.Result{}
	for _, r := range b.pass(t, dnscheck.CheckProbe) {
		if r.Rung != drift.RungTransaction {
			t.Errorf("%s %s on rung %s, want transaction", r.Machine, r.Check, r.Rung)
		}
		out[r.Machine] = r
	}
	if len(out) != len(b.fleet.Inventory.Machines) {
		t.Errorf("%d coredns-probe results, want one per machine (%d)", len(out), len(b.fleet.Inventory.Machines))
	}
	return out
}

// fault sets one machine's faults and returns what restores them.
func (b *probeBed) fault(machine string, change func(*sim.Faults)) (restore func()) {
	m := b.fleet.Sim.Machine(machine)
	before := m.Faults()
	f := m.Faults()
	change(&f)
	m.SetFaults(f)
	return func() { m.SetFaults(before) }
}

func (b *probeBed) machines() []string {
	var names []string
	for _, m := range b.fleet.Inventory.Machines {
		names = append(names, m.Name)
	}
	return names
}

func expectProbe(t *testing.T, rs map[string]drift.Result, machine string, status drift.Status, reason, next string) {
	t.Helper()
	r, ok := rs[machine]
	switch {
	case !ok:
		t.Errorf("no coredns-probe result for %s", machine)
	case r.Status != status || !strings.Contains(r.Reason, reason) || !strings.Contains(r.Next, next):
		t.Errorf("%s: %s %q next %q evidence %q; want %s with %q, next %q", machine, r.Status, r.Reason, r.Next, r.Evidence, status, reason, next)
	}
}

// TestCoreDNSProbe: per node, a pod on the pod network asks kube-dns for
// kubernetes.default.svc.cluster.local. The sim plays what Cilium, CoreDNS
// and dig make of it (sim/dnsprobe.go): the answer comes only while a
// CoreDNS pod is Ready behind kube-dns and the node's pod network reaches
// the ClusterIP.
func TestCoreDNSProbe(t *testing.T) {
	b := startProbeBed(t)
	logs := "kubectl -n kube-system logs -l k8s-app=kube-dns"

	t.Run("healthy cluster: every node resolves to the kubernetes ClusterIP", func(t *testing.T) {
		rs := b.probes(t)
		for _, m := range b.machines() {
			expectProbe(t, rs, m, drift.StatusInSync, "", "")
			ev := strings.Join(rs[m].Evidence, "\n")
			want := "from the pod network on node " + m + ", kubernetes.default.svc.cluster.local. A through kube-dns 10.96.0.10: 10.96.0.1 (Service default/kubernetes)"
			if !strings.Contains(ev, want) {
				t.Errorf("%s evidence lacks %q:\n%s", m, want, ev)
			}
		}
	})

	t.Run("pod network broken on one node: only that node is Drifted", func(t *testing.T) {
		defer b.fault("worker-1", func(f *sim.Faults) { f.CiliumPodNetworkBroken = true })()
		rs := b.probes(t)
		expectProbe(t, rs, "worker-1", drift.StatusDrifted,
			"from the pod network on node worker-1, kubernetes.default.svc.cluster.local. A through kube-dns 10.96.0.10: no reply: ;; communications error to 10.96.0.10#53: timed out; ;; no servers could be reached", logs)
		for _, m := range b.machines() {
			if m != "worker-1" {
				expectProbe(t, rs, m, drift.StatusInSync, "", "")
			}
		}
	})

	t.Run("CoreDNS not answering: every node is Drifted", func(t *testing.T) {
		for _, m := range b.machines() {
			defer b.fault(m, func(f *sim.Faults) { f.CoreDNSNotAnswering = true })()
		}
		rs := b.probes(t)
		for _, m := range b.machines() {
			expectProbe(t, rs, m, drift.StatusDrifted, "no reply: ;; communications error to 10.96.0.10#53: timed out", logs)
		}
	})

	t.Run("CoreDNS scaled to 0: every node is refused", func(t *testing.T) {
		scale(t, b.kube, 0)
		b.fleet.Sim.SyncKubelets(t.Context(), b.kube) // the controllers' round: no pod, no endpoint
		defer func() {
			scale(t, b.kube, 2)
			b.settle(t)
		}()
		rs := b.probes(t)
		for _, m := range b.machines() {
			expectProbe(t, rs, m, drift.StatusDrifted, "no reply: ;; communications error to 10.96.0.10#53: connection refused; ;; no servers could be reached", logs)
			if ev := strings.Join(rs[m].Evidence, "\n"); !strings.Contains(ev, "Service kube-dns 10.96.0.10: 0 of 0 endpoints ready") {
				t.Errorf("%s evidence: %s", m, ev)
			}
		}
	})

	t.Run("CoreDNS serving another domain: NXDOMAIN", func(t *testing.T) {
		defer corefileDomain(t, b.kube, "cluster.local", "cluster.example")()
		rs := b.probes(t)
		for _, m := range b.machines() {
			expectProbe(t, rs, m, drift.StatusDrifted, "A through kube-dns 10.96.0.10: answered NXDOMAIN: ;; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN", logs)
			if strings.Contains(rs[m].Reason, "id:") {
				t.Errorf("%s: the reason carries the query id, which differs per node: %s", m, rs[m].Reason)
			}
		}
	})

	t.Run("no kubelet runs the pod: Unknown, and the pod is deleted", func(t *testing.T) {
		// no RunKubelets: the pods never start; the machine's deadline ends them
		f := b.fleet
		fc := &checks.FleetCheck{Inventory: f.Inventory, Desired: f.Desired, Dialer: f.Dialer, Kube: b.kube, Checks: []string{dnscheck.CheckProbe}, Machines: []string{"worker-2"},
			Families: dnscheck.Checks(dnscheck.Options{Probe: &probe.Options{Timeout: time.Second}}), Concurrency: 1, Timeout: 10 * time.Second}
		rep, err := fc.Report(t.Context(), drift.Header{Cluster: "homelab"})
		if err != nil {
			t.Fatal(err)
		}
		rs := map[string]drift.Result{}
		for _, r := range rep.Results {
			rs[r.Machine] = r
		}
		expectProbe(t, rs, "worker-2", drift.StatusUnknown, "did not finish within 1s (never started: is the node's kubelet up?)", "get events")
		left, err := b.kube.CoreV1().Pods(probe.DefaultNamespace).List(t.Context(), metav1.ListOptions{})
		if err != nil || len(left.Items) > 0 {
			t.Errorf("probe pods left: %d %v", len(left.Items), err)
		}
	})

	t.Run("without --probe there is no coredns-probe check", func(t *testing.T) {
		infos := drift.Infos(dnscheck.Checks(dnscheck.Options{}))
		if slices.ContainsFunc(infos, func(i drift.Info) bool { return i.Name == dnscheck.CheckProbe }) {
			t.Errorf("checks %v", infos)
		}
	})
}

func scale(t *testing.T, kube kubernetes.Interface, replicas int32) {
	t.Helper()
	s, err := kube.AppsV1().Deployments("kube-system").GetScale(t.Context(), "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Spec.Replicas = replicas
	if _, err := kube.AppsV1().Deployments("kube-system").UpdateScale(t.Context(), "coredns", s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// corefileDomain makes CoreDNS' Corefile serve to instead of from (as a
// cluster whose manifests were rendered for another domain has it) and
// returns what puts it back.
func corefileDomain(t *testing.T, kube kubernetes.Interface, from, to string) (restore func()) {
	t.Helper()
	set := func(from, to string) {
		cm, err := kube.CoreV1().ConfigMaps("kube-system").Get(context.Background(), "coredns", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(cm.Data["Corefile"], "kubernetes "+from+" ") {
			t.Fatalf("the Corefile does not serve %s:\n%s", from, cm.Data["Corefile"])
		}
		cm.Data["Corefile"] = strings.ReplaceAll(cm.Data["Corefile"], from, to)
		if _, err := kube.CoreV1().ConfigMaps("kube-system").Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	set(from, to)
	return func() { set(to, from) }
}

// ParseDig reads what dig prints: the status and the answer's addresses,
// nothing from the comment lines.
func TestParseDig(t *testing.T) {
	for _, c := range []struct {
		out, status string
		addrs       []string
	}{
		{";; Got answer:\n;; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 1\n;; flags: qr aa rd; QUERY: 1, ANSWER: 1, AUTHORITY: 0, ADDITIONAL: 1\n\n;; ANSWER SECTION:\nkubernetes.default.svc.cluster.local. 30 IN\tA\t10.96.0.1\n", "NOERROR", []string{"10.96.0.1"}},
		{";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 2\n;; ANSWER SECTION:\nkubernetes.default.svc.cluster.local.\t5\tIN\tAAAA\tfd00::1\nother.\t5\tIN\tCNAME\tx.\n", "NOERROR", []string{"fd00::1"}},
		{";; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: 3\n", "NXDOMAIN", nil},
		{";; communications error to 10.96.0.10#53: timed out\n;; no servers could be reached\n", "", nil},
	} {
		a := dnscheck.ParseDig(c.out)
		if a.Status != c.status || !slices.Equal(a.Addresses, c.addrs) {
			t.Errorf("ParseDig(%q) = %+v, want %s %v", c.out, a, c.status, c.addrs)
		}
	}
}

// What each outcome of a probe pod makes of the check: an answer without
// the kubernetes ClusterIP is Drifted as much as no answer; a pod without
// an outcome is Unknown with what to do next.
func TestJudge(t *testing.T) {
	n := dnscheck.Names{Name: "kubernetes.default.svc.cluster.local.", Type: "A", Server: "10.96.0.10", Want: "10.96.0.1"}
	reply := func(records ...string) string {
		return ";; ->>HEADER<<- opcode: QUERY, status: NOERROR, id: 7\n;; ANSWER SECTION:\n" + strings.Join(records, "\n") + "\n"
	}
	for _, c := range []struct {
		name         string
		r            probe.Result
		status       drift.Status
		reason, next string
	}{
		{"the right address", probe.Result{Pod: "p/1", Succeeded: true, Message: reply("kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.1")}, drift.StatusInSync, "", ""},
		{"a wrong address", probe.Result{Pod: "p/2", Succeeded: true, Message: reply("kubernetes.default.svc.cluster.local. 30 IN A 10.96.0.99")}, drift.StatusDrifted,
			"from the pod network on node w-1, kubernetes.default.svc.cluster.local. A through kube-dns 10.96.0.10: answered 10.96.0.99, not the kubernetes Service ClusterIP 10.96.0.1", "logs -l k8s-app=kube-dns"},
		{"no address", probe.Result{Pod: "p/3", Succeeded: true, Message: reply()}, drift.StatusDrifted, "answered no address, not the kubernetes Service ClusterIP", "logs"},
		{"SERVFAIL", probe.Result{Pod: "p/4", Succeeded: true, Message: ";; ->>HEADER<<- opcode: QUERY, status: SERVFAIL, id: 9\n"}, drift.StatusDrifted, "answered SERVFAIL: ;; ->>HEADER<<- opcode: QUERY, status: SERVFAIL", "logs"},
		{"dig not there", probe.Result{Pod: "p/5", ExitCode: 127, Message: "/bin/sh: exec: line 0: dig: not found"}, drift.StatusDrifted, "dig failed: /bin/sh: exec: line 0: dig: not found (exit 127)", "logs"},
		{"no namespace", probe.Result{Err: fmt.Errorf("create probe pod in devata-probe: %w", apierrors.NewNotFound(corev1.Resource("namespaces"), "devata-probe"))},
			drift.StatusUnknown, `create probe pod in devata-probe: namespaces "devata-probe" not found`, "create the probe namespace"},
	} {
		r := dnscheck.JudgeForTest(n, "w-1", c.r)
		if r.Status != c.status || !strings.Contains(r.Reason, c.reason) || !strings.Contains(r.Next, c.next) {
			t.Errorf("%s: %s %q next %q, want %s %q next %q", c.name, r.Status, r.Reason, r.Next, c.status, c.reason, c.next)
		}
	}
}
