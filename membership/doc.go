// Package membership changes who is in the cluster: it finds the etcd
// members and Kubernetes Nodes that no machine of the inventory has
// (orphans), and removes one on an operator's explicit command (devata
// remove), as talosctl's manual sequence does: cordon and drain the Node,
// take the member out of etcd under the quorum rule (gate.MayRemove), reset
// the machine with a graceful leave and a wipe, delete the Node.
//
// The loop never removes anything on its own: a machine missing from the
// inventory may be a mistake in the inventory, and removing a control plane
// is not undone by adding it back.
//
// What it follows in Talos v1.11.0:
//   - EtcdLeaveCluster (internal/app/machined/internal/server/v1alpha1/
//     v1alpha1_server.go) runs on the leaving control plane: it removes its
//     own member through the other members (internal/pkg/etcd/etcd.go
//     Client.LeaveCluster, retried while etcd answers unhealthy), then stops
//     its etcd service and deletes its data directory. So it needs the
//     machine up; a machine that is gone is removed by EtcdRemoveMemberByID
//     from any member that stays.
//   - Reset with graceful set (the reset sequence in
//     internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_sequencer.go)
//     cordons and drains the Node and leaves etcd itself (LeaveEtcd in
//     v1alpha1_sequencer_tasks.go, which does nothing when the data
//     directory is gone, as after EtcdLeaveCluster), then wipes; an empty
//     system_partitions_to_wipe wipes every system partition. With reboot
//     the machine comes back in maintenance mode; without, it halts.
//   - The Node object is not deleted by Talos: kubectl delete node is the
//     last step of Talos' own scale-down guide, and devata's.
package membership
