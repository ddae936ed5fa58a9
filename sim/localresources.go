package sim

import (
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
)

// localResources are resources machined's controllers keep about the node
// itself that Talos' API integration suites read:
//   - runtime SecurityState (security.go);
//   - network HostnameStatus "hostname": the hostname in effect
//     (controllers/network/hostname_spec.go HostnameSpecController writes the
//     status once the spec applies; the config's hostname, else the
//     machine's name, as the sim's Node is named);
//   - etcd Member "local" on a control plane whose etcd service runs
//     healthy: its member ID (etcd.FormatMemberID), destroyed otherwise
//     (controllers/etcd/member.go MemberController).
//
// EtcdSuite/TestMembers maps Member IDs to hostnames and compares them with
// EtcdMemberList.
func localResources(s snapshot) []resource.Resource {
	out := []resource.Resource{securityState()}

	hs := network.NewHostnameStatus(network.NamespaceName, network.HostnameID)
	hs.TypedSpec().Hostname = s.hostname()
	out = append(out, hs)

	if s.configured() && s.controlPlane() && s.etcdID != 0 && serviceHealthy(s, "etcd") {
		m := etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID)
		m.TypedSpec().MemberID = etcd.FormatMemberID(s.etcdID)
		out = append(out, m)
	}

	return out
}
