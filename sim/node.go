package sim

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
)

// service is one Talos service as ServiceList and the Service resource show it.
type service struct {
	id      string
	state   string
	running bool
	healthy bool
	unknown bool // no health check
	message string
	events  []serviceEvent
}

type serviceEvent struct {
	msg   string
	state string
	ts    time.Time
}

// servicesOf lists the services of a configured node. etcd waits in
// Preparing until the node holds etcd data.
func servicesOf(s snapshot) []service {
	if s.active == nil {
		return nil
	}

	ids := []string{"apid", "auditd", "containerd", "cri", "dashboard", "kubelet", "machined", "syslogd", "udevd"}
	if s.controlPlane() {
		ids = append(ids, "etcd", "trustd")
		slices.Sort(ids)
	}

	if s.bootFailing {
		// the boot sequence fails before StartAllServices loads them
		ids = slices.DeleteFunc(ids, func(id string) bool { return ephemeralServices[id] })
	}

	noHealthCheck := map[string]bool{"auditd": true, "dashboard": true, "syslogd": true, "udevd": true}

	at := func(d time.Duration) time.Time { return s.booted.Add(d) }

	svcs := make([]service, 0, len(ids))

	for _, id := range ids {
		svc := service{id: id, state: "Running", running: true, healthy: true, unknown: noHealthCheck[id]}
		svc.events = []serviceEvent{
			{msg: "Starting service", state: "Preparing", ts: at(0)},
			{msg: "Service started as goroutine", state: "Running", ts: at(time.Second)},
		}

		if !svc.unknown {
			svc.message = "Health check successful"
			svc.events = append(svc.events, serviceEvent{msg: "Health check successful", state: "Running", ts: at(2 * time.Second)})
		}

		switch {
		case id == "etcd" && !s.etcdStopped.IsZero():
			// EtcdLeaveCluster stopped it (system.Services Stop)
			svc.state, svc.running, svc.healthy = "Finished", false, false
			svc.message = "service not running"
			svc.events = append(svc.events, serviceEvent{msg: "Service finished successfully", state: "Finished", ts: s.etcdStopped})
		case id == "etcd" && !s.etcdFailed.IsZero():
			svc = service{id: id, state: "Failed", unknown: true, message: s.etcdFailure}
			svc.events = []serviceEvent{
				{msg: "Running pre state", state: "Preparing", ts: at(time.Second)},
				{msg: s.etcdFailure, state: "Failed", ts: s.etcdFailed},
			}
		case id == "etcd" && s.learnerRunning():
			// etcd runs as a learner: the health check's linearizable Get
			// (internal/pkg/etcd ValidateQuorum) is refused until the
			// member is promoted (etcd v3rpc interceptor.go,
			// isRPCSupportedForLearner)
			svc.healthy = false
			svc.message = errLearner
			svc.events = append(svc.events[:2:2], serviceEvent{msg: "Health check failed: " + errLearner, state: "Running", ts: at(2 * time.Second)})
		case id == "etcd" && (s.etcdID == 0 || s.etcdPreparing()):
			// The PreFunc waits to join a cluster (services/etcd.go
			// buildInitialCluster) until this node is bootstrapped or
			// joins: the service stays Preparing, health unknown. Its
			// "etcd is waiting to join the cluster…" is a log line of
			// machined's, not a service event.
			svc = service{id: id, state: "Preparing", unknown: true, message: ""}
			svc.events = []serviceEvent{
				{msg: "Running pre state", state: "Preparing", ts: at(time.Second)},
			}
		case id == "etcd" && !s.etcdRemoved.IsZero():
			// another member removed this one: etcd exits, the runner
			// restarts it, and it exits again
			svc.state, svc.running, svc.healthy = "Failed", false, false
			svc.message = "Error running Containerd(etcd), going to restart forever: task \"etcd\" failed: exit code 1"
			svc.events = append(svc.events, serviceEvent{msg: svc.message, state: "Failed", ts: s.etcdRemoved})
		case ephemeralServices[id] && !s.stoppedAt.IsZero():
			// an upgrade's StopServicesEphemeral stopped it: the runner
			// finished, and health reads "service not running"
			// (system.go StopWithRevDepenencies, service_runner.go run)
			svc.state, svc.running, svc.healthy = "Finished", false, false
			svc.message = "service not running"
			svc.events = append(svc.events, serviceEvent{msg: "Service finished successfully", state: "Finished", ts: s.stoppedAt})
		case id == "kubelet" && s.kubeletRestarting():
			// KubeletServiceController stopped it for a new spec and
			// starts it again (restart.go)
			svc = service{id: id, state: "Preparing", unknown: true, message: "Running pre state"}
			svc.events = append(svc.events[:len(svc.events):len(svc.events)],
				serviceEvent{msg: "Service finished successfully", state: "Finished", ts: s.restarts[kubeletComponent].at.Add(s.restartDelay / 4)},
				serviceEvent{msg: "Running pre state", state: "Preparing", ts: s.restarts[kubeletComponent].at.Add(s.restartDelay / 4)})
		case id == "kubelet" && s.faults.KubeletUnhealthy:
			svc.healthy = false
			svc.message = "Get \"http://127.0.0.1:10248/healthz\": dial tcp 127.0.0.1:10248: connect: connection refused"
			svc.events = append(svc.events, serviceEvent{msg: "Health check failed: " + svc.message, state: "Running", ts: at(3 * time.Second)})
		}

		svcs = append(svcs, svc)
	}

	return svcs
}

// ephemeralServices are what an upgrade's StopServicesEphemeral stops
// (v1alpha1_sequencer_tasks.go: cri with its reverse dependencies, and
// trustd).
var ephemeralServices = map[string]bool{"cri": true, "etcd": true, "kubelet": true, "trustd": true}

// requiredServices are the services MachineStatus waits for
// (machine_status.go getReadinessChecks).
func requiredServices(s snapshot) []string {
	if s.controlPlane() {
		return []string{"apid", "machined", "kubelet", "etcd", "trustd"}
	}

	return []string{"apid", "machined", "kubelet"}
}

// servicesUp reports every service of the boot up (running, and healthy
// where it has a health check): what StartAllServices waits for before the
// boot sequence ends (v1alpha1_sequencer_tasks.go StartAllServices,
// system.StateEventUp). On a control plane that includes etcd, so it stays
// booting until it is bootstrapped or joins.
func servicesUp(s snapshot) bool {
	for _, svc := range servicesOf(s) {
		if !svc.running || (!svc.unknown && !svc.healthy) {
			return false
		}
	}

	return true
}

// unmetConditions are the reasons MachineStatus gives for not being ready,
// in machined's order and words (machine_status.go: time, network,
// services, staticPods, nodeReady). The time and network checks always
// pass here; staticPods fails while a static pod restarts after a config
// change (restart.go).
func unmetConditions(s snapshot) []runtime.UnmetCondition {
	var unmet []runtime.UnmetCondition

	// services: the Service resources (running services only), sorted by
	// id, then the required ones that have none
	var problems []string

	running := map[string]bool{}

	for _, svc := range servicesOf(s) {
		if !svc.running {
			continue
		}

		running[svc.id] = true

		if !svc.unknown && !svc.healthy {
			problems = append(problems, svc.id+" not healthy")
		}
	}

	for _, id := range requiredServices(s) {
		if !running[id] {
			problems = append(problems, id+" not running")
		}
	}

	if len(problems) > 0 {
		unmet = append(unmet, runtime.UnmetCondition{Name: "services", Reason: strings.Join(problems, ", ")})
	}

	// staticPods: a static pod the kubelet is replacing is Running but not
	// Ready (restart.go)
	var pods []string

	for _, p := range staticPodsOf(s) {
		if !p.ready {
			pods = append(pods, kubeSystem+"/"+p.id(s.hostname())+" not ready")
		}
	}

	if len(pods) > 0 {
		unmet = append(unmet, runtime.UnmetCondition{Name: "staticPods", Reason: strings.Join(pods, ", ")})
	}

	// nodeReady: the Nodename exists once the machine is configured; its
	// NodeStatus only once the kubelet registered the Node with an API
	// server.
	switch {
	case !s.node.seen:
		unmet = append(unmet, runtime.UnmetCondition{Name: "nodeReady", Reason: fmt.Sprintf("node %q status is not available yet", s.hostname())})
	case !s.node.ready:
		unmet = append(unmet, runtime.UnmetCondition{Name: "nodeReady", Reason: fmt.Sprintf("node %q is not ready", s.hostname())})
	}

	return unmet
}

// sync rewrites the machine's COSI resources from its current state.
func (m *Machine) sync() {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()

	// The boot sequence ends, once, when every service of this boot is up.
	s := m.snap()
	if s.configured() && !s.down && !s.bootDone && !s.bootFailing && servicesUp(s) {
		m.mu.Lock()
		m.bootDone = true
		m.mu.Unlock()

		s = m.snap()
	}

	s.apiUp = m.fleet.hasEtcd()
	s.manifestsFailing = m.fleet.manifestApplyFailing()
	m.fetchExtraManifests(s)

	managed, err := put(context.Background(), m.st, m.managed, desiredResources(s))
	m.managed = managed

	if err != nil {
		m.fleet.log.Error("sim: sync resources", "machine", m.name, "error", err)
	}
}

// desiredResources are the machine's COSI resources, in one list read top
// to bottom: network, hardware and status on every machine; config, volumes
// and mounts, services and kubernetes once it is configured.
func desiredResources(s snapshot) []resource.Resource {
	var out []resource.Resource

	out = append(out, networkResources(s)...)
	out = append(out, hardwareResources(s)...)
	out = append(out, machineStatus(s), versionResource(s))
	out = append(out, localResources(s)...)
	out = append(out, extensionResources(s)...)

	if s.active == nil {
		return out
	}

	out = append(out, config.NewMachineConfigWithID(s.active, config.ActiveID))
	if s.persisted != nil {
		// nil only while a reset that wiped STATE goes down
		out = append(out, config.NewMachineConfigWithID(s.persisted, config.PersistentID))
	}
	out = append(out, volumeResources(s)...)
	out = append(out, serviceResources(s)...)
	out = append(out, kubernetesResources(s)...)

	return out
}

// networkResources are the node's addresses, its host address in every
// NodeAddress.
func networkResources(s snapshot) []resource.Resource {
	addr, err := netip.ParseAddr(s.host)
	if err != nil {
		return nil
	}

	var out []resource.Resource

	for _, id := range []resource.ID{network.NodeAddressDefaultID, network.NodeAddressCurrentID, network.NodeAddressRoutedID, network.NodeAddressAccumulativeID} {
		na := network.NewNodeAddress(network.NamespaceName, id)
		na.TypedSpec().Addresses = []netip.Prefix{netip.PrefixFrom(addr, addr.BitLen())}
		out = append(out, na)
	}

	return out
}

// versionResource is runtime.Version, which VersionController writes with
// the running Talos' tag (controllers/runtime/version.go).
func versionResource(s snapshot) *runtime.Version {
	v := runtime.NewVersion()
	v.TypedSpec().Version = s.version

	return v
}

// machineStatus is the MachineStatus: maintenance and ready until the
// machine is configured, then booting (running once the boot sequence
// ended) and ready when no condition is unmet.
func machineStatus(s snapshot) *runtime.MachineStatus {
	ms := runtime.NewMachineStatus()
	if s.active == nil {
		ms.TypedSpec().Stage = runtime.MachineStageMaintenance
		ms.TypedSpec().Status.Ready = true

		return ms
	}

	ms.TypedSpec().Stage = runtime.MachineStageBooting
	if s.bootDone {
		ms.TypedSpec().Stage = runtime.MachineStageRunning
	}

	if s.upgrading {
		// machine_status.go: an upgrade sequence's start sets the stage;
		// getReadinessChecks has no checks outside booting and running,
		// so an upgrading machine is ready
		ms.TypedSpec().Stage = runtime.MachineStageUpgrading
		ms.TypedSpec().Status.Ready = true

		return ms
	}

	ms.TypedSpec().Status.UnmetConditions = unmetConditions(s)
	ms.TypedSpec().Status.Ready = len(ms.TypedSpec().Status.UnmetConditions) == 0

	return ms
}

// serviceResources are the Service resources of the running services.
func serviceResources(s snapshot) []resource.Resource {
	var out []resource.Resource

	for _, svc := range servicesOf(s) {
		if !svc.running {
			continue // machined makes a Service resource once the service runs
		}

		r := v1alpha1.NewService(svc.id)
		r.TypedSpec().Running = true
		r.TypedSpec().Healthy = svc.healthy && !svc.unknown
		r.TypedSpec().Unknown = svc.unknown
		out = append(out, r)
	}

	return out
}

// kubernetesResources are the KubeletSpec and KubePrismStatuses of a
// configured machine, its StaticPodStatuses, on a control plane with etcd
// the ManifestStatus, and on a control plane the Manifests (manifests.go).
func kubernetesResources(s snapshot) []resource.Resource {
	var out []resource.Resource

	if kc := s.active.K8sKubeletConfig(); s.active.Machine() != nil && kc != nil {
		ks := k8s.NewKubeletSpec(k8s.NamespaceName, k8s.KubeletID)
		ks.TypedSpec().Image = kc.Image()
		ks.TypedSpec().ExtraMounts = kubeletMounts(s, kc.ExtraMounts())
		ks.TypedSpec().ExpectedNodename = s.hostname()
		ks.TypedSpec().Args = []string{"--hostname-override=" + s.hostname()}
		out = append(out, ks)

		if kp := s.active.K8sKubePrismConfig(); kp != nil {
			st := k8s.NewKubePrismStatuses(k8s.NamespaceName, k8s.KubePrismStatusesID)
			// kubeprism_config.go listens on 127.0.0.1; kubeprism.go is
			// healthy only while an upstream API server answers, which
			// needs etcd
			st.TypedSpec().Host = fmt.Sprintf("127.0.0.1:%d", kp.Port())
			st.TypedSpec().Healthy = s.apiUp
			out = append(out, st)
		}
	}

	for _, st := range staticPodStatuses(s) {
		out = append(out, st)
	}

	if cc := s.active.Cluster(); cc != nil && s.controlPlane() && s.etcdID != 0 && !s.manifestsFailing {
		st := k8s.NewManifestStatus(k8s.ControlPlaneNamespaceName)
		st.TypedSpec().ManifestsApplied = manifestsOf(s)
		out = append(out, st)
	}
	out = append(out, manifestResources(s)...) // manifests.go

	return out
}

func prettySize(n uint64) string {
	const unit = 1000

	if n < unit {
		return fmt.Sprintf("%d B", n)
	}

	div, exp := uint64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}

	return fmt.Sprintf("%.0f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
