package netcheck_test

import (
	"context"
	"errors"
	"testing"

	"devata.dev/devata/checks/probe"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/netcheck"
)

// An unobserved side is Unknown in every cilium check, also when the
// inventory expects no kube-proxy replacement: nothing was seen, and an
// Unknown is never reported as InSync. The declaration reads the Talos side
// (unreachable machine); the agent, services and probe read Kubernetes (no
// kubeconfig).
func TestUnknownWhenNotObserved(t *testing.T) {
	m := &inventory.Machine{Name: "worker-2", Address: "10.0.0.2", Role: inventory.RoleWorker}
	unreachable := &netcheck.Observation{Err: errors.New("dial 10.0.0.2:50000: connection refused")}
	checks := netcheck.Checks(netcheck.Options{Probe: &probe.Options{}})
	for _, kpr := range []bool{true, false} {
		for _, tg := range []*netcheck.View{
			{Machine: m, Expect: netcheck.Expect{KubeProxyReplacement: kpr}, Obs: unreachable, Cluster: nil},
			{Machine: m, Expect: netcheck.Expect{KubeProxyReplacement: kpr}, Obs: unreachable, Cluster: &netcheck.Cluster{Err: errors.New("no kubeconfig")}},
		} {
			for _, ch := range checks {
				for _, r := range ch.Evaluate(context.Background(), m.Name, netcheck.TargetOf(tg)) {
					if r.Status != drift.StatusUnknown || r.Next == "" {
						t.Errorf("kube-proxy replacement %t, %s: %s %s (%s), next %q", kpr, ch.Name, r.Check, r.Status, r.Reason, r.Next)
					}
				}
			}
		}
	}
}
