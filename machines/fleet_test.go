package machines_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	machineapi "github.com/siderolabs/talos/pkg/machinery/api/machine"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/checks"
	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// testFleet is the homelab example on the sim, etcd bootstrapped.
type testFleet struct {
	*simtest.Fleet
	dialer *talosapi.Dialer
}

func startFleet(t *testing.T) *testFleet {
	t.Helper()
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	return &testFleet{Fleet: f, dialer: f.Dialer}
}

func (tf *testFleet) drift(t *testing.T, selected ...string) *drift.Report {
	t.Helper()
	rep := drift.NewReport(drift.Header{Cluster: tf.Inventory.Cluster.Name, Simulated: true})
	fc := &checks.FleetCheck{Inventory: tf.Inventory, Desired: tf.Desired, Dialer: tf.dialer, Checks: selected, Concurrency: 4, Timeout: 5 * time.Second}
	if err := fc.Run(context.Background(), rep); err != nil {
		t.Fatal(err)
	}
	rep.Finish()
	return rep
}

func statusOf(rep *drift.Report, machine, check string) drift.Result {
	for _, r := range rep.Results {
		if r.Machine == machine && r.Check == check {
			return r
		}
	}
	return drift.Result{}
}

func TestHealthyFleetIsInSync(t *testing.T) {
	tf := startFleet(t)
	rep := tf.drift(t, machines.CheckConfig, machines.CheckTalosVersion, machines.CheckMachineStage, machines.CheckEtcd)
	if got := len(rep.Results); got != 5*3+3 {
		t.Errorf("%d results, want 18 (3 checks × 5 machines + etcd on 3 control planes)", got)
	}
	for _, r := range rep.Results {
		if r.Status != drift.StatusInSync {
			t.Errorf("%s/%s: %s %s", r.Machine, r.Check, r.Status, r.Reason)
		}
	}
}

func TestEachCheckInSyncDriftedUnknown(t *testing.T) {
	tf := startFleet(t)
	drifted := bytes.Replace(tf.Desired["worker-1"], []byte("hostname: worker-1"), []byte("hostname: intruder"), 1)
	tf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: drifted, KubeletUnhealthy: true})
	tf.Sim.Machine("worker-2").SetFaults(sim.Faults{TalosVersion: "v1.10.6"})
	tf.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})

	rep := tf.drift(t)
	tests := []struct {
		machine, check string
		status         drift.Status
		reasonHas      string
	}{
		{"cp-1", machines.CheckConfig, drift.StatusInSync, ""},
		{"worker-1", machines.CheckConfig, drift.StatusDrifted, "applied config differs"},
		{"cp-3", machines.CheckConfig, drift.StatusUnknown, "talos api"},
		{"cp-1", machines.CheckTalosVersion, drift.StatusInSync, ""},
		{"worker-2", machines.CheckTalosVersion, drift.StatusDrifted, "differs"},
		{"cp-3", machines.CheckTalosVersion, drift.StatusUnknown, ""},
		{"cp-2", machines.CheckMachineStage, drift.StatusInSync, ""},
		{"cp-3", machines.CheckMachineStage, drift.StatusUnknown, ""},
		{"worker-1", machines.CheckKubelet, drift.StatusDrifted, "not healthy"},
		{"worker-2", machines.CheckKubelet, drift.StatusUnknown, "kubeconfig"},
		{"cp-3", machines.CheckEtcd, drift.StatusUnknown, ""},
	}
	for _, tt := range tests {
		r := statusOf(rep, tt.machine, tt.check)
		if r.Status != tt.status || !strings.Contains(r.Reason, tt.reasonHas) {
			t.Errorf("%s/%s: %s %q, want %s containing %q", tt.machine, tt.check, r.Status, r.Reason, tt.status, tt.reasonHas)
		}
	}
	if d := statusOf(rep, "worker-1", machines.CheckConfig).Diff; !strings.Contains(d, "+        hostname: worker-1") {
		t.Errorf("config diff lacks the hostname change:\n%s", d)
	}
	for _, name := range []string{"cp-1", "cp-2", "worker-1", "worker-2"} {
		if statusOf(rep, name, machines.CheckConfig).Status == drift.StatusUnknown {
			t.Errorf("%s not fully checked next to an unreachable machine", name)
		}
	}
	if rep.ExitCode() != 2 {
		t.Errorf("exit code %d, want 2 (one machine unknown)", rep.ExitCode())
	}
}

func TestReaderCertificateMakesConfigUnknown(t *testing.T) {
	tf := startFleet(t)
	crt, err := tf.Bundle.GenerateTalosAPIClientCertificate(roleReader())
	if err != nil {
		t.Fatal(err)
	}
	tc := clientconfig.NewConfig("reader", nil, tf.Bundle.Certs.OS.Crt, crt)
	tf.dialer, err = talosapi.NewDialer(tc, tf.Overrides)
	if err != nil {
		t.Fatal(err)
	}
	rep := tf.drift(t, machines.CheckConfig, machines.CheckTalosVersion)
	r := statusOf(rep, "cp-1", machines.CheckConfig)
	if r.Status != drift.StatusUnknown || !strings.Contains(r.Next, "os:admin") {
		t.Errorf("config with a reader cert: %s %q next %q", r.Status, r.Reason, r.Next)
	}
	if s := statusOf(rep, "cp-1", machines.CheckTalosVersion).Status; s != drift.StatusInSync {
		t.Errorf("version with a reader cert: %s", s)
	}
}

func TestMaintenanceMachineIsDrifted(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"worker-2"}})
	ctx := context.Background()
	o := talosapi.Observe(ctx, f.Dialer, f.Inventory.Machine("worker-2"))
	if !o.Maintenance {
		t.Fatalf("maintenance not detected: %v", o.Err)
	}
	rs := machines.Checks()[0].Evaluate(ctx, "worker-2", &target.Target{Machine: f.Inventory.Machine("worker-2"), Obs: o, Desired: f.Desired["worker-2"]})
	if rs[0].Status != drift.StatusDrifted || !strings.Contains(rs[0].Reason, "maintenance") {
		t.Errorf("maintenance machine: %s %q", rs[0].Status, rs[0].Reason)
	}
}

func TestApplyModesAgainstSim(t *testing.T) {
	tf := startFleet(t)
	ctx := context.Background()
	w := tf.Inventory.Machine("worker-1")
	c, err := tf.dialer.Client(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	changed := bytes.Replace(tf.Desired["worker-1"], []byte("time.cloudflare.com"), []byte("pool.ntp.org"), 1)
	out, err := talosapi.DryRun(ctx, c, changed, talosapi.ModeAuto)
	if err != nil {
		t.Fatal(err)
	}
	if out.Mode != talosapi.ModeNoReboot {
		t.Errorf("auto dry run of a time-server change resolved to %s, want no-reboot", out.Mode)
	}
	if n := tf.Sim.Machine("worker-1").Calls("ApplyConfiguration"); n != 1 {
		t.Errorf("%d ApplyConfiguration calls after a dry run", n)
	}
	o := talosapi.Observe(ctx, tf.dialer, w)
	if !bytes.Equal(o.Active, tf.Desired["worker-1"]) {
		t.Error("dry run changed the active config")
	}
	if _, err := talosapi.Apply(ctx, c, changed, talosapi.ModeNoReboot, 0); err != nil {
		t.Fatal(err)
	}
	if o := talosapi.Observe(ctx, tf.dialer, w); !bytes.Equal(o.Active, changed) {
		t.Error("apply did not change the active config")
	}
	tf.Sim.Machine("worker-1").SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"ApplyConfiguration": codes.PermissionDenied}})
	if _, err := talosapi.Apply(ctx, c, tf.Desired["worker-1"], talosapi.ModeAuto, 0); err == nil || !errors.Is(err, err) || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("injected error not surfaced: %v", err)
	}
}

func TestKubeletCheckAgainstRealKubernetes(t *testing.T) {
	tf := startFleet(t)
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: tf.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if errs := tf.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatal(errs)
	}
	run := func() *drift.Report {
		rep := drift.NewReport(drift.Header{Cluster: tf.Inventory.Cluster.Name, Simulated: true})
		fc := &checks.FleetCheck{Inventory: tf.Inventory, Desired: tf.Desired, Dialer: tf.dialer, Kube: kc, Checks: []string{machines.CheckKubelet}, Concurrency: 4, Timeout: 5 * time.Second}
		if err := fc.Run(ctx, rep); err != nil {
			t.Fatal(err)
		}
		rep.Finish()
		return rep
	}
	// cluster.network.cni none: every Node waits for Cilium, and the check
	// says so.
	for _, r := range run().Results {
		if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "NetworkPluginNotReady") || !strings.Contains(r.Next, "no CNI runs on the node yet") {
			t.Errorf("%s before the CNI: %s %s (next %s)", r.Machine, r.Status, r.Reason, r.Next)
		}
	}
	if err := sim.InstallCilium(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	if errs := tf.Sim.SyncKubelets(ctx, kc); len(errs) > 0 {
		t.Fatal(errs)
	}
	rep := run()
	for _, r := range rep.Results {
		if r.Status != drift.StatusInSync {
			t.Errorf("%s: %s %s", r.Machine, r.Status, r.Reason)
		}
	}

	// An unhealthy kubelet, a label removed behind Talos' back (until Talos
	// reapplies it), a label the inventory gained.
	tf.Sim.Machine("worker-1").SetFaults(sim.Faults{KubeletUnhealthy: true})
	tf.Sim.SyncKubelets(ctx, kc)
	n, err := kc.CoreV1().Nodes().Get(ctx, "worker-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, "topology.kubernetes.io/zone")
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	tf.Inventory.Machine("cp-1").Labels["extra"] = "label"
	rep = run()
	for _, tt := range []struct{ machine, want string }{
		{"worker-2", "Node lacks labels topology.kubernetes.io/zone=rack-b"},
		{"worker-1", "not healthy"},
		{"worker-1", "is not Ready"},
		{"cp-1", "Node lacks labels extra=label"},
	} {
		r := statusOf(rep, tt.machine, machines.CheckKubelet)
		if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, tt.want) {
			t.Errorf("%s: %s %q, want Drifted with %q", tt.machine, r.Status, r.Reason, tt.want)
		}
	}
	if r := statusOf(rep, "cp-2", machines.CheckKubelet); r.Status != drift.StatusInSync {
		t.Errorf("cp-2: %s %s", r.Status, r.Reason)
	}

	// viaKubernetes labels and taints the Node lacks: Drifted, devata
	// apply (or kubectl) the next step; once on the Node, in sync.
	cp2 := tf.Inventory.Machine("cp-2")
	cp2.ViaKubernetes = inventory.ViaKubernetes{Labels: map[string]string{"node-role.kubernetes.io/infra": ""}, Taints: map[string]string{"example.com/infra": "only:NoSchedule"}}
	r := statusOf(run(), "cp-2", machines.CheckKubelet)
	if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "Node lacks viaKubernetes labels node-role.kubernetes.io/infra=; Node lacks viaKubernetes taints example.com/infra=only:NoSchedule") ||
		!strings.HasPrefix(r.Next, "devata apply") || !strings.Contains(r.Next, "kubectl label node cp-2 node-role.kubernetes.io/infra= --overwrite; kubectl taint node cp-2 example.com/infra=only:NoSchedule") {
		t.Errorf("cp-2 without its viaKubernetes keys: %s %q (next %q)", r.Status, r.Reason, r.Next)
	}
	if n, err = kc.CoreV1().Nodes().Get(ctx, "cp-2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Labels["node-role.kubernetes.io/infra"] = ""
	n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: "example.com/infra", Value: "only", Effect: corev1.TaintEffectNoSchedule})
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := statusOf(run(), "cp-2", machines.CheckKubelet); r.Status != drift.StatusInSync {
		t.Errorf("cp-2 with its viaKubernetes keys: %s %s", r.Status, r.Reason)
	}

	// Set by devata (its owned annotations say so), then dropped from the
	// inventory: Drifted until apply removes them, the kubectl commands
	// that remove them the next step; Talos' and others' keys are not
	// devata's to report.
	if n, err = kc.CoreV1().Nodes().Get(ctx, "cp-2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Annotations[talosapi.OwnedLabelsAnnotation] = `["node-role.kubernetes.io/infra"]`
	n.Annotations[talosapi.OwnedTaintsAnnotation] = `["example.com/gone","example.com/infra"]`
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cp2.ViaKubernetes = inventory.ViaKubernetes{}
	r = statusOf(run(), "cp-2", machines.CheckKubelet)
	if r.Status != drift.StatusDrifted ||
		r.Reason != "Node carries viaKubernetes labels node-role.kubernetes.io/infra that devata set and the inventory no longer declares; Node carries viaKubernetes taints example.com/infra that devata set and the inventory no longer declares" ||
		!strings.HasPrefix(r.Next, "devata apply") || !strings.Contains(r.Next, "kubectl label node cp-2 node-role.kubernetes.io/infra-; kubectl taint node cp-2 example.com/infra:NoSchedule-") {
		t.Errorf("cp-2 after its viaKubernetes keys were dropped: %s %q (next %q)", r.Status, r.Reason, r.Next)
	}
	// an owned annotation that cannot be read: Drifted, never quoted
	if n, err = kc.CoreV1().Nodes().Get(ctx, "cp-2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	n.Annotations[talosapi.OwnedTaintsAnnotation] = "not-json{quoted-never"
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r = statusOf(run(), "cp-2", machines.CheckKubelet)
	if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "Node annotation devata.dev/owned-taints is unreadable") ||
		!strings.Contains(r.Reason, "Node carries viaKubernetes labels node-role.kubernetes.io/infra") ||
		!strings.Contains(r.Next, "kubectl annotate node cp-2 devata.dev/owned-taints-") ||
		strings.Contains(r.Reason+r.Next+strings.Join(r.Evidence, " "), "quoted-never") {
		t.Errorf("cp-2 with an unreadable owned-taints annotation: %s %q (next %q)", r.Status, r.Reason, r.Next)
	}
	// gone from the Node (as apply leaves it): in sync
	if n, err = kc.CoreV1().Nodes().Get(ctx, "cp-2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	delete(n.Labels, "node-role.kubernetes.io/infra")
	delete(n.Annotations, talosapi.OwnedLabelsAnnotation)
	delete(n.Annotations, talosapi.OwnedTaintsAnnotation)
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(tn corev1.Taint) bool { return tn.Key == "example.com/infra" })
	if _, err := kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := statusOf(run(), "cp-2", machines.CheckKubelet); r.Status != drift.StatusInSync {
		t.Errorf("cp-2 with the dropped keys removed: %s %s", r.Status, r.Reason)
	}

	// An identity that may not list Nodes (a service account without
	// deploy/rbac.yaml): Unknown, and the next step is the RBAC it lacks,
	// not a kubeconfig it may well have.
	tf.Sim.Machine("worker-1").SetFaults(sim.Faults{})
	nobody, err := env.User("nobody")
	if err != nil {
		t.Fatal(err)
	}
	if kc, err = kubernetes.NewForConfig(nobody); err != nil {
		t.Fatal(err)
	}
	for _, r := range run().Results {
		if r.Status != drift.StatusUnknown || !strings.Contains(r.Reason, "forbidden") || !strings.Contains(r.Next, "needs list on nodes") || strings.Contains(r.Next, "kubeconfig)") {
			t.Errorf("%s as a user who may not list Nodes: %s %q (next %q), want Unknown naming the RBAC it lacks", r.Machine, r.Status, r.Reason, r.Next)
		}
	}
}

func TestStageAndEtcdDrifted(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"cp-3"}, Bootstrap: true})
	f.Sim.Machine("worker-1").SetFaults(sim.Faults{KubeletUnhealthy: true})
	tf := &testFleet{Fleet: f, dialer: f.Dialer}
	rep := tf.drift(t, machines.CheckMachineStage, machines.CheckEtcd)
	for _, tt := range []struct {
		machine, check string
		status         drift.Status
		reasonHas      string
	}{
		{"worker-1", machines.CheckMachineStage, drift.StatusDrifted, "unmet: services: kubelet not healthy"},
		{"worker-2", machines.CheckMachineStage, drift.StatusInSync, ""},
		{"cp-1", machines.CheckEtcd, drift.StatusDrifted, "members [cp-1 cp-2], control planes [cp-1 cp-2 cp-3]"},
		{"cp-3", machines.CheckEtcd, drift.StatusDrifted, "maintenance mode"},
	} {
		r := statusOf(rep, tt.machine, tt.check)
		if r.Status != tt.status || !strings.Contains(r.Reason, tt.reasonHas) {
			t.Errorf("%s/%s: %s %q, want %s containing %q", tt.machine, tt.check, r.Status, r.Reason, tt.status, tt.reasonHas)
		}
	}
}

// A control plane taken out of the inventory but still an etcd member is
// named as an orphan, with the member ID talosctl etcd remove-member takes:
// nothing removes a member on its own (issue 16).
func TestEtcdMemberNotInTheInventoryIsNamed(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	inv := *f.Inventory
	inv.Machines = slices.DeleteFunc(slices.Clone(inv.Machines), func(m inventory.Machine) bool { return m.Name == "cp-3" })
	tf := &testFleet{Fleet: f, dialer: f.Dialer}
	tf.Inventory = &inv
	rep := tf.drift(t, machines.CheckEtcd)
	r := statusOf(rep, "cp-1", machines.CheckEtcd)
	if r.Status != drift.StatusDrifted || !strings.Contains(r.Reason, "etcd member cp-3 is not in the inventory") {
		t.Fatalf("cp-1/etcd: %s %q", r.Status, r.Reason)
	}
	c, err := f.Dialer.Client(t.Context(), f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.EtcdMemberList(t.Context(), &machineapi.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := ""
	for _, m := range resp.GetMessages()[0].GetMembers() {
		if m.GetHostname() == "cp-3" {
			id = etcdres.FormatMemberID(m.GetId())
		}
	}
	if id == "" || !strings.Contains(r.Next, "etcd remove-member "+id) || !strings.Contains(r.Next, "talosctl -n cp-3 etcd leave") || !strings.Contains(r.Next, "add cp-3 back to the inventory") {
		t.Errorf("next step %q does not name cp-3's member ID %s", r.Next, id)
	}
}
