package sim

import (
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	timeres "github.com/siderolabs/talos/pkg/machinery/resources/time"

	"devata.dev/devata/internal/talos"
)

// localResources are resources machined's controllers keep about the node
// itself that Talos' API integration suites and talosctl read:
//   - runtime SecurityState (security.go);
//   - network HostnameStatus "hostname": the hostname in effect
//     (controllers/network/hostname_spec.go HostnameSpecController writes the
//     status once the spec applies; the config's hostname, else the
//     machine's name, as the sim's Node is named);
//   - etcd Member "local" on a control plane whose etcd service runs
//     healthy: its member ID (etcd.FormatMemberID), destroyed otherwise
//     (controllers/etcd/member.go MemberController);
//   - from Talos 1.14 (rdversions.go typesSince), k8s KubeletStatus
//     "kubelet": the kubelet's image, what controllers/k8s/kubelet_status.go
//     KubeletStatusController copies from the KubeletSpec of a configured
//     machine; and time NTPStatus "node": the NTP client's spike filter
//     (controllers/time/sync.go SyncController, every poll, configured or
//     not), which never discards a measurement in the sim.
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

	if minor, ok := talos.Minor(s.version); ok && minor >= 14 {
		out = append(out, timeres.NewNTPStatus())

		if s.configured() {
			if k := s.active.K8sKubeletConfig(); k != nil {
				ks := k8s.NewKubeletStatus(k8s.NamespaceName, k8s.KubeletID)
				ks.TypedSpec().Image = k.Image()
				out = append(out, ks)
			}
		}
	}

	return out
}
