package sim

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/resource"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
)

// Cluster discovery, as Talos v1.11.0 has it: every member publishes an
// affiliate (internal/app/machined/pkg/controllers/cluster/
// local_affiliate.go) to the registries cluster.discovery enables (the
// discovery service, or Kubernetes), and member.go MemberController turns
// the affiliates of the cluster (cluster.id) into Member resources named by
// nodename: addresses, hostname, machine type, OS, the API server port of
// control planes. talosctl health without node flags reads them
// (cmd/talosctl/cmd/talos/health.go buildClusterInfo).
//
// The sim's registry is the fleet itself: the configured machines whose
// config enables discovery with a registry and names the same cluster ID.
// A machine that is down stays a member, as an affiliate does until its
// TTL runs out. Members are refreshed whenever a client reads them, so
// that a machine configured later shows up without every machine being
// resynced on every apply.

func discoveryOn(s snapshot) bool {
	if !s.configured() || s.active.Cluster() == nil || s.active.Cluster().Discovery() == nil {
		return false
	}

	d := s.active.Cluster().Discovery()
	if !d.Enabled() || d.Registries() == nil {
		return false
	}

	r := d.Registries()

	return len(s.active.DiscoveryServiceConfigs()) > 0 || (r.Kubernetes() != nil && r.Kubernetes().Enabled())
}

// membersOf are the Member resources the machine's MemberController holds.
func (f *Fleet) membersOf(s snapshot) []resource.Resource {
	if !discoveryOn(s) {
		return nil
	}

	id := clusterID(s)

	var out []resource.Resource

	for _, x := range f.Machines() {
		o := x.snap()
		if !discoveryOn(o) || clusterID(o) != id {
			continue
		}

		r := cluster.NewMember(cluster.NamespaceName, o.hostname())
		spec := r.TypedSpec()
		spec.NodeID = fmt.Sprintf("%016x", fnvSum("node-id/"+o.name))
		spec.Hostname = o.hostname()
		spec.OperatingSystem = "Talos (" + o.version + ")"
		spec.MachineType = o.active.Machine().Type()

		if a, err := netip.ParseAddr(o.host); err == nil {
			spec.Addresses = []netip.Addr{a}
		}

		if spec.MachineType == machinetype.TypeControlPlane || spec.MachineType == machinetype.TypeInit {
			spec.ControlPlane = &cluster.ControlPlane{APIServerPort: o.active.K8sAPIServerConfig().APIPort()}
		}

		out = append(out, r)
	}

	return out
}

// syncMembers rewrites the machine's Member resources from the fleet.
func (m *Machine) syncMembers(ctx context.Context) {
	m.membersMu.Lock()
	defer m.membersMu.Unlock()

	managed, err := put(ctx, m.st, m.members, m.fleet.membersOf(m.snap()))
	m.members = managed

	if err != nil {
		m.fleet.log.Error("sim: sync members", "machine", m.name, "error", err)
	}
}

// clusterID is the discovery identity's cluster ID: the v1alpha1
// cluster.id or, from Talos 1.14 on, a DiscoveryIdentityConfig document.
func clusterID(s snapshot) string {
	if d := s.active.DiscoveryIdentityConfig(); d != nil {
		return d.ClusterID()
	}

	return ""
}
