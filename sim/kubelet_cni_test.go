package sim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// After a reboot a real kubelet reports its Node NotReady until the CNI
// agent on the node runs again: the kubelet's runtime network status is
// containerd's NetworkReady (kubernetes pkg/kubelet/kubelet.go
// updateRuntimeUp, runtimeState.networkErrors), which
// pkg/kubelet/nodestatus/setters.go ReadyCondition turns into Ready=False,
// KubeletNotReady, "container runtime network not ready: …" (set by
// kubelet_node_status.go defaultNodeStatusFuncs). The sim's Node stays so
// until the node's cilium agent pod is Ready again (CNIStartDelay after the
// boot): a Node read Ready through the API server while its agent pod is
// not fails the test. The reboot is machinery's Reboot call.
func TestNodeNotReadyAfterARebootUntilTheCNIAgentRunsAgain(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := sim.InstallCilium(ctx, env.Config); err != nil {
		t.Fatal(err)
	}
	node := func() (corev1.NodeCondition, *corev1.Pod) {
		t.Helper()
		f.Sim.SyncKubelets(ctx, kc)
		n, err := kc.CoreV1().Nodes().Get(ctx, "worker-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var c corev1.NodeCondition
		for _, cond := range n.Status.Conditions {
			if cond.Type == corev1.NodeReady {
				c = cond
			}
		}
		pods, err := kc.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=worker-1", LabelSelector: "k8s-app=cilium"})
		if err != nil || len(pods.Items) != 1 {
			t.Fatalf("cilium agent pods on worker-1: %v, %d, want 1", err, len(pods.Items))
		}
		return c, &pods.Items[0]
	}
	eventually(t, "worker-1 Ready with its agent", func() error {
		if c, _ := node(); c.Status != corev1.ConditionTrue {
			return fmt.Errorf("Ready %s: %s", c.Status, c.Message)
		}
		return nil
	})

	_, before := node()
	booted := before.Status.StartTime
	// start times have a second's precision: let the next boot's differ
	time.Sleep(time.Until(booted.Add(1100 * time.Millisecond)))
	c, err := f.Dialer.Client(ctx, f.Inventory.Machine("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close() //nolint:errcheck
	if err := c.Reboot(ctx); err != nil {
		t.Fatal(err)
	}
	// the agent pod's start time is the boot's: until it changes, what the
	// API server holds is from before the reboot (or the Node is Unknown)
	var sawNetwork bool
	eventually(t, "worker-1 Ready again after its reboot", func() error {
		cond, agent := node()
		switch {
		case agent.Status.StartTime.Equal(booted):
			return fmt.Errorf("not back from its reboot yet: Ready %s", cond.Status)
		case cond.Status == corev1.ConditionFalse:
			if cond.Reason != "KubeletNotReady" || cond.Message != sim.NetworkNotReadyMessage {
				t.Fatalf("worker-1 back from its reboot: Ready False %s %q, want KubeletNotReady %q", cond.Reason, cond.Message, sim.NetworkNotReadyMessage)
			}
			if podReady(agent) == corev1.ConditionTrue {
				t.Fatalf("worker-1 NotReady for want of a CNI while its agent pod %s is Ready", agent.Name)
			}
			sawNetwork = true
			return fmt.Errorf("NotReady: %s", cond.Message)
		case cond.Status != corev1.ConditionTrue:
			return fmt.Errorf("Ready %s: %s", cond.Status, cond.Message)
		case podReady(agent) != corev1.ConditionTrue:
			t.Fatalf("worker-1 Ready after its reboot while its agent pod %s is not (%v)", agent.Name, agent.Status.Conditions)
		}
		return nil
	})
	if !sawNetwork {
		t.Errorf("worker-1 came back Ready without ever reporting NetworkPluginNotReady")
	}
}
