package sim

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/cosi-project/runtime/pkg/resource"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/resources/cluster"
)

// Cluster discovery, as Talos v1.11.0 to v1.14.1 have it: every member publishes an
// affiliate (internal/app/machined/pkg/controllers/cluster/
// local_affiliate.go) to the registries its config enables (the
// discovery service, or Kubernetes: cluster.discovery, and from 1.14 the
// DiscoveryServiceConfig and DiscoveryIdentityConfig documents; see
// discoveryOn), and member.go MemberController turns
// the affiliates of the cluster (its cluster ID) into Member resources named by
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

// discoveryOn reports whether the machine publishes an affiliate, as
// Talos v1.14.1 decides it (controllers/cluster/config.go ConfigController,
// local_affiliate.go: a discovery service endpoint, or the Kubernetes
// registry): a discovery service comes from the v1alpha1
// cluster.discovery (enabled, with its service registry) or, from 1.14, a
// DiscoveryServiceConfig document, which machinery's
// DiscoveryServiceConfigs surfaces either way; the Kubernetes registry is
// only in v1alpha1, under cluster.discovery.enabled. For a v1alpha1-only
// config (every Talos before 1.14 refuses the new document) this is what
// v1.11's and v1.13's ConfigController decide too.
func discoveryOn(s snapshot) bool {
	if !s.configured() || s.active.Cluster() == nil {
		return false
	}

	if len(s.active.DiscoveryServiceConfigs()) > 0 {
		return true
	}

	d := s.active.Cluster().Discovery()
	if d == nil || !d.Enabled() || d.Registries() == nil {
		return false
	}

	k := d.Registries().Kubernetes()

	return k != nil && k.Enabled()
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
