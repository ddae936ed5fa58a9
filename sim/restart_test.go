package sim_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	corev1 "k8s.io/api/core/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"devata.dev/devata/sim"
)

// A live change of cluster.apiServer and machine.kubelet restarts the API
// server's static pod and the kubelet (restart.go): first the machine still
// reports the old image, ready; then the pod is Running but not Ready with
// the new image, the kubelet service is not running and MachineStatus says
// so; then both run the new image and the machine is ready again.
func TestLiveChangeRestartsComponents(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := startWith(t, sim.Options{RestartDelay: 4 * time.Second, Machines: []sim.MachineSpec{{Name: "cp-1", Role: "controlplane", Config: cp}}})
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	c := admin(t, f.Machine("cp-1").Addr())
	until(t, "cp-1 ready", func() (bool, error) { return runningReady(t, c) })

	const (
		oldAPI = "registry.k8s.io/kube-apiserver:v1.34.1"
		newAPI = "registry.k8s.io/kube-apiserver:v1.34.2"
	)
	if img, podReady := apiServerPod(t, c); img != oldAPI || !podReady {
		t.Fatalf("before the change: kube-apiserver %s ready %t; want %s ready", img, podReady, oldAPI)
	}

	next := patch(t, cp, `cluster:
  apiServer:
    image: `+newAPI+`
machine:
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.34.2
`)
	if _, err := apply(t, c, next, machine.ApplyConfigurationRequest_NO_REBOOT, false); err != nil {
		t.Fatalf("apply: %v", err)
	}

	// the controllers have not reacted yet
	if img, podReady := apiServerPod(t, c); img != oldAPI || !podReady {
		t.Errorf("right after the apply: kube-apiserver %s ready %t; want still %s ready", img, podReady, oldAPI)
	}

	until(t, "the API server pod restarting", func() (bool, error) {
		img, podReady := apiServerPod(t, c)

		return img == newAPI && !podReady, nil
	})

	ms, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		t.Fatalf("MachineStatus: %v", err)
	}

	unmet := map[string]string{}
	for _, u := range ms.TypedSpec().Status.UnmetConditions {
		unmet[u.Name] = u.Reason
	}

	if want := "kube-system/kube-apiserver-cp-1 not ready"; unmet["staticPods"] != want || ms.TypedSpec().Status.Ready {
		t.Errorf("MachineStatus while restarting: ready %t, unmet %v; want staticPods %q", ms.TypedSpec().Status.Ready, unmet, want)
	}

	if want := "kubelet not running"; !slices.Contains(splitReasons(unmet["services"]), want) {
		t.Errorf("MachineStatus services while the kubelet restarts: %q; want %q in it", unmet["services"], want)
	}

	if state := serviceState(t, c, "kubelet"); state != "Preparing" {
		t.Errorf("kubelet service while restarting: %s; want Preparing", state)
	}

	until(t, "restarted on the new images", func() (bool, error) {
		img, podReady := apiServerPod(t, c)
		if img != newAPI || !podReady {
			return false, nil
		}

		return runningReady(t, c)
	})

	if state := serviceState(t, c, "kubelet"); state != "Running" {
		t.Errorf("kubelet service after the restart: %s; want Running", state)
	}
}

func apiServerPod(t *testing.T, c *client.Client) (image string, ready bool) {
	t.Helper()

	st, err := safe.StateGet[*k8s.StaticPodStatus](t.Context(), c.COSI, resource.NewMetadata(k8s.NamespaceName, k8s.StaticPodStatusType, "kube-system/kube-apiserver-cp-1", resource.VersionUndefined))
	if err != nil {
		t.Fatalf("StaticPodStatus: %v", err)
	}

	var ps corev1.PodStatus
	if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(st.TypedSpec().PodStatus, &ps); err != nil {
		t.Fatalf("pod status: %v", err)
	}

	if len(ps.ContainerStatuses) != 1 {
		t.Fatalf("pod status has %d containers, want 1", len(ps.ContainerStatuses))
	}

	for _, cond := range ps.Conditions {
		if cond.Type == corev1.PodReady {
			ready = cond.Status == corev1.ConditionTrue
		}
	}

	return ps.ContainerStatuses[0].Image, ready
}

func runningReady(t *testing.T, c *client.Client) (bool, error) {
	t.Helper()

	ms, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		return false, err
	}

	// no Kubernetes here: the Node never registers
	for _, u := range ms.TypedSpec().Status.UnmetConditions {
		if u.Name != "nodeReady" {
			return false, nil
		}
	}

	return ms.TypedSpec().Stage == runtime.MachineStageRunning, nil
}

func splitReasons(s string) []string {
	var out []string
	for r := range strings.SplitSeq(s, ", ") {
		out = append(out, r)
	}

	return out
}
