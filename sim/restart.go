package sim

import (
	"maps"
	"reflect"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
)

// What a live config change restarts, as Talos does it (v1.14.1; v1.11.0
// the same way):
//
//   - internal/app/machined/pkg/controllers/k8s/kubelet_service.go
//     KubeletServiceController.Run: on every change of its inputs, the
//     KubeletSpec and the kubelet secrets (secrets.Kubelet), it stops the
//     kubelet service and starts it again. Meanwhile the service is not
//     running (MachineStatus: "kubelet not running"), nothing posts the
//     Node, and the Node carries the new kubeletVersion only once the new
//     kubelet posts (what talosctl upgrade-k8s waits for:
//     pkg/cluster/kubernetes/kubelet.go upgradeKubeletOnNode).
//   - control_plane_static_pod.go ControlPlaneStaticPodController writes a
//     new static pod manifest when the APIServerConfig,
//     ControllerManagerConfig or SchedulerConfig changes, or the versions
//     of the rendered secrets and of the API server's configuration files
//     it stamps on the pods (SecretsStatus, ConfigStatus). The kubelet
//     replaces the pod; until the new one passes its probes, StaticPodStatus
//     and the mirror pod are Running but not Ready, and MachineStatus'
//     staticPods check reports "kube-system/<pod> not ready"
//     (machine_status.go staticPodsCheck). talosctl upgrade-k8s waits for
//     the mirror pod of the new config to be Ready (talos_managed.go
//     checkPodStatus).
//
// A change is a change of what those controllers derive from the config,
// never of the config's text: the same settings in the v1alpha1 document
// and in 1.14's documents (KubeletConfig, KubeAPIServerConfig, …) derive
// the same resources, and COSI does not even write an unchanged resource
// (cosi-project/runtime state/wrap.go UpdateWithConflicts: resource.Equal,
// a reflect.DeepEqual of the specs), so nothing restarts. restartsOf derives
// them as the controllers do (kubeletInputsOf, staticPodInputsOf).
//
// Neither starts at once: the controllers react a moment after the apply
// replied, so right after a live apply the machine still reports the old
// image, ready. The sim plays that moment as a quarter of RestartDelay,
// then the restart as RestartDelay. A reboot starts everything anew.
type restart struct {
	from string    // the image before the change
	at   time.Time // when the apply changed the spec
}

// Components a live config change restarts.
const (
	kubeletComponent = "kubelet"
	apiServerPod     = "kube-apiserver"
	controllerPod    = "kube-controller-manager"
	schedulerPod     = "kube-scheduler"
)

// restartsOf lists, by component, the image each component ran before
// next replaced current, for the components whose derived inputs changed.
func restartsOf(current, next config.Provider) map[string]string {
	if current == nil || next == nil || current.Machine() == nil || next.Machine() == nil || current.K8sKubeletConfig() == nil {
		return nil
	}

	out := map[string]string{}

	if !reflect.DeepEqual(kubeletInputsOf(current), kubeletInputsOf(next)) {
		out[kubeletComponent] = current.K8sKubeletConfig().Image()
	}

	if !current.Machine().Type().IsControlPlane() || !next.Machine().Type().IsControlPlane() {
		return out
	}

	cur, nxt := staticPodInputsOf(current), staticPodInputsOf(next)
	if cur == nil || nxt == nil {
		return out
	}

	if !reflect.DeepEqual(cur.apiServer, nxt.apiServer) || !reflect.DeepEqual(cur.apiServerFiles, nxt.apiServerFiles) || !reflect.DeepEqual(cur.secrets, nxt.secrets) {
		out[apiServerPod] = cur.apiServer.Image
	}

	if !reflect.DeepEqual(cur.controllerManager, nxt.controllerManager) || !reflect.DeepEqual(cur.secrets, nxt.secrets) {
		out[controllerPod] = cur.controllerManager.Image
	}

	if !reflect.DeepEqual(cur.scheduler, nxt.scheduler) || !reflect.DeepEqual(cur.secrets, nxt.secrets) {
		out[schedulerPod] = cur.scheduler.Image
	}

	return out
}

// activateLocked makes cfg the active config of a running machine, as a
// live apply or a try does, and notes the restarts it causes. It reports
// whether any; the caller then calls scheduleRestartSyncs once m.mu is
// released.
func (m *Machine) activateLocked(cfg config.Provider) bool {
	changed := restartsOf(m.active, cfg)
	m.active = cfg

	if m.down || len(changed) == 0 {
		return false
	}

	m.fleet.log.Debug("sim: a live change restarts", "machine", m.name, "components", slices.Sorted(maps.Keys(changed)))

	if m.restarts == nil {
		m.restarts = map[string]restart{}
	}

	now := time.Now()

	for c, from := range changed {
		if prev, ok := m.restarts[c]; ok && prev.at.After(m.booted) && now.Sub(prev.at) < m.fleet.restartDelay/4 {
			from = prev.from // the first change has not been picked up yet
		}

		m.restarts[c] = restart{from: from, at: now}
	}

	return true
}

// scheduleRestartSyncs rewrites the machine's resources when the restarts
// begin and when they end.
func (m *Machine) scheduleRestartSyncs() {
	d := m.fleet.restartDelay
	time.AfterFunc(d/4, m.sync)
	time.AfterFunc(d/4+d+10*time.Millisecond, m.sync)
}

// restartPhase says where a component stands after its last live change:
// still the old spec (old), being restarted (restarting), or neither (the
// new spec runs, or nothing changed since the boot).
func (s snapshot) restartPhase(component string) (old, restarting bool) {
	r, ok := s.restarts[component]
	if !ok || r.at.Before(s.booted) {
		return false, false
	}

	since, lag := time.Since(r.at), s.restartDelay/4

	switch {
	case since < lag:
		return true, false
	case since < lag+s.restartDelay:
		return false, true
	}

	return false, false
}

// kubeletImage is the image of the kubelet that runs: the old one until the
// restart of a change begins.
func (s snapshot) kubeletImage() string {
	if old, _ := s.restartPhase(kubeletComponent); old {
		return s.restarts[kubeletComponent].from
	}

	return s.active.K8sKubeletConfig().Image()
}

// kubeletRestarting: the kubelet service is stopped for a restart.
func (s snapshot) kubeletRestarting() bool {
	_, restarting := s.restartPhase(kubeletComponent)

	return restarting
}
