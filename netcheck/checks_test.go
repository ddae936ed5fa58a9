package netcheck_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/labels"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/netcheck"
)

// healthyCluster is the snapshot of a healthy Helm install.
func healthyCluster() *netcheck.Cluster {
	return &netcheck.Cluster{
		Agent: &netcheck.Agent{Namespace: "kube-system", Name: "cilium", Env: map[string]string{
			netcheck.EnvServiceHost: "localhost", netcheck.EnvServicePort: "7445",
		}},
		Config:         map[string]string{netcheck.KeyKPR: "true"},
		NodeConfigsCRD: true,
		NodeLabels:     map[string]map[string]string{"cp-1": {"kubernetes.io/hostname": "cp-1"}},
	}
}

func healthyObservation() *netcheck.Observation {
	return &netcheck.Observation{
		Manifests: []string{"00-kubelet-bootstrapping-token", "11-core-dns"}, ManifestsFound: true,
		KubePrism: netcheck.KubePrism{Host: "localhost:7445", Healthy: true}, KubePrismFound: true,
	}
}

// TestDeclarationOnConstructedState covers what the sim and the test API
// server cannot be made to show: KubePrism unhealthy (the sim always reports
// it healthy), reads that fail, and objects netcheck cannot interpret.
func TestDeclarationOnConstructedState(t *testing.T) {
	f := simtest.Start(t, simtest.Options{})
	m := f.Inventory.Machine("cp-1")
	expect := netcheck.ExpectFrom(f.Inventory)
	run := func(mutate func(*netcheck.View)) drift.Result {
		tg := &netcheck.View{Machine: m, Expect: expect, Active: f.Desired["cp-1"], Obs: healthyObservation(), Cluster: healthyCluster()}
		mutate(tg)
		rs := netcheck.Checks(netcheck.Options{})[0].Evaluate(context.Background(), m.Name, netcheck.TargetOf(tg))
		if len(rs) != 1 {
			t.Fatalf("%d results", len(rs))
		}
		return rs[0]
	}
	for _, tt := range []struct {
		name      string
		mutate    func(*netcheck.View)
		status    drift.Status
		reason    string
		next      string
		evidences string
	}{
		{"healthy", func(*netcheck.View) {}, drift.StatusInSync, "", "", "KubePrismStatuses localhost:7445 healthy true"},
		{"KubePrism unhealthy", func(tg *netcheck.View) { tg.Obs.KubePrism.Healthy = false }, drift.StatusDrifted,
			"KubePrism at localhost:7445 is not healthy: the cilium agent cannot reach the API server through localhost:7445", "get kubeprismendpoints -o yaml", ""},
		{"KubePrism on another port", func(tg *netcheck.View) { tg.Obs.KubePrism.Host = "localhost:7446" }, drift.StatusDrifted,
			"KubePrism listens on localhost:7446, the inventory's k8sServicePort is 7445", "machine.features.kubePrism.port", ""},
		{"KubePrism not read", func(tg *netcheck.View) {
			tg.Obs.KubePrismErr = errors.New("list KubePrismStatuses: not authorized (PermissionDenied)")
		}, drift.StatusUnknown, "list KubePrismStatuses", "get kubeprismstatuses", ""},
		{"active config needs os:admin", func(tg *netcheck.View) {
			tg.Active, tg.ActiveErr = nil, status.Error(codes.PermissionDenied, "not authorized")
		}, drift.StatusUnknown, "not authorized", "os:admin", ""},
		{"agent host through valueFrom", func(tg *netcheck.View) {
			delete(tg.Cluster.Agent.Env, netcheck.EnvServiceHost)
			tg.Cluster.Agent.ValueFrom = []string{netcheck.EnvServiceHost}
		}, drift.StatusUnknown, "sets KUBERNETES_SERVICE_HOST through valueFrom", "get daemonset cilium -o yaml", ""},
		{"agent pointed at the VIP", func(tg *netcheck.View) {
			tg.Cluster.Agent.Env[netcheck.EnvServiceHost] = "10.20.0.10"
			tg.Cluster.Agent.Env[netcheck.EnvServicePort] = "6443"
		}, drift.StatusDrifted, "DaemonSet kube-system/cilium has KUBERNETES_SERVICE_HOST=10.20.0.10, inventory localhost; DaemonSet kube-system/cilium has KUBERNETES_SERVICE_PORT=6443, inventory 7445", "helm upgrade cilium", ""},
		{"no agent", func(tg *netcheck.View) { tg.Cluster.Agent = nil }, drift.StatusDrifted, "no cilium agent DaemonSet", "helm -n kube-system status cilium", ""},
		{"override for a node not registered", func(tg *netcheck.View) {
			tg.Cluster.NodeLabels = map[string]map[string]string{}
			tg.Cluster.NodeConfigs = []netcheck.NodeConfig{{Namespace: "kube-system", Name: "all", Selector: labels.Everything(), Defaults: map[string]string{netcheck.KeyKPR: "false"}}}
		}, drift.StatusUnknown, "no Node cp-1 is registered", "kubectl get node cp-1", ""},
		{"override to true is fine", func(tg *netcheck.View) {
			tg.Cluster.NodeConfigs = []netcheck.NodeConfig{{Namespace: "kube-system", Name: "all", Selector: labels.Everything(), Defaults: map[string]string{netcheck.KeyKPR: "true"}}}
		}, drift.StatusInSync, "", "", "CiliumNodeConfig kube-system/all sets kube-proxy-replacement=true"},
		{"a drift beats an unknown", func(tg *netcheck.View) {
			tg.Cluster.Config[netcheck.KeyKPR] = "false"
			tg.Obs.ManifestsErr = errors.New("list ManifestStatus: timeout")
		}, drift.StatusDrifted, `has kube-proxy-replacement="false"`, "", ""},
		{"no replacement expected", func(tg *netcheck.View) {
			tg.Expect.KubeProxyReplacement = false
			tg.Cluster = nil
		}, drift.StatusInSync, "", "", "no kube-proxy replacement expected"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := run(tt.mutate)
			if r.Status != tt.status || !strings.Contains(r.Reason, tt.reason) || !strings.Contains(r.Next, tt.next) ||
				!strings.Contains(strings.Join(r.Evidence, "\n"), tt.evidences) {
				t.Errorf("got %s\nwant %s, reason %q, next %q, evidence %q", describe(r), tt.status, tt.reason, tt.next, tt.evidences)
			}
			if r.Rung != drift.RungDeclaration || r.Check != netcheck.CheckDeclaration {
				t.Errorf("rung %q check %q", r.Rung, r.Check)
			}
			if r.Status != drift.StatusInSync && r.Next == "" {
				t.Errorf("no next step: %s", describe(r))
			}
		})
	}
}

func TestEvaluateKubePrism(t *testing.T) {
	e := netcheck.Expect{ServiceHost: "localhost", ServicePort: 7445}
	for _, tt := range []struct {
		name  string
		kp    netcheck.KubePrism
		found bool
		want  []string
	}{
		{"healthy", netcheck.KubePrism{Host: "localhost:7445", Healthy: true}, true, nil},
		{"down", netcheck.KubePrism{Host: "localhost:7445"}, true, []string{"KubePrism at localhost:7445 is not healthy"}},
		{"absent", netcheck.KubePrism{}, false, []string{"KubePrism is not running on the node"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ps := netcheck.EvaluateKubePrism(e, tt.kp, tt.found, "talosctl -n 10.20.0.11 ")
			if len(ps) != len(tt.want) {
				t.Fatalf("%v, want %q", ps, tt.want)
			}
			for i, p := range ps {
				if !strings.HasPrefix(p.Reason, tt.want[i]) || !strings.Contains(p.Next, "talosctl -n 10.20.0.11 get kubeprism") {
					t.Errorf("%+v, want reason %q and a talosctl next step", p, tt.want[i])
				}
			}
		})
	}
}
