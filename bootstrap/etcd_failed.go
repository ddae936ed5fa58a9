package bootstrap

import (
	"fmt"
	"strings"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// The etcd service's Failed events that say what the node's data
// directory holds, as Talos v1.11.0 and v1.14.1 word them (the service
// runner capitalises the error and prefixes a PreFunc's with "Failed to
// run pre stage: ", system/service_runner.go Start, system/system.go):
const (
	// services/etcd.go buildInitialCluster gave up after
	// constants.EtcdJoinTimeout (30 min); it runs only while the data
	// directory is empty (argsForControlPlane: IsDirEmpty).
	eventJoinFailed = "failed to build initial etcd cluster"
	// services/etcd.go recoverFromSnapshot: etcdutl's Restore failed, and
	// it writes member/snap/db before it checks the hash (etcdutl
	// snapshot/v3_snapshot.go copyAndVerifyDB): data is left behind.
	eventRestoreFailed = "error recovering from the snapshot"
	// recoverFromSnapshot: the snapshot's status could not be read;
	// nothing was written.
	eventSnapshotUnreadable = "error verifying snapshot"
	// the Containerd runner restarts etcd for ever: it exits on every
	// start, on data it cannot run from.
	eventCrashLoop = "going to restart forever"
)

// failedFact reads a Failed etcd service's event, or returns nil when it
// does not say what the data directory holds.
func failedFact(svc *talosapi.EtcdService) *etcdFact {
	since := svc.Since.UTC().Format(time.RFC3339)
	switch ev := svc.Event; {
	case strings.Contains(ev, eventJoinFailed):
		return &etcdFact{None: true, JoinFailed: true,
			Seen: fmt.Sprintf("service etcd Failed since %s: it gave up waiting to join or be bootstrapped (%q); its data directory is empty, and Talos starts it again only after a reboot", since, ev)}
	case strings.Contains(ev, eventSnapshotUnreadable):
		return &etcdFact{None: true,
			Seen: fmt.Sprintf("service etcd Failed since %s: the recovery could not read the snapshot and wrote nothing (%q)", since, ev)}
	case strings.Contains(ev, eventRestoreFailed):
		return &etcdFact{HasData: true, Broken: true,
			Seen:   fmt.Sprintf("service etcd Failed since %s: a restore from a snapshot failed after it wrote etcd's data directory (%q)", since, ev),
			Advice: "Talos' restore (etcdutl) writes the database before it checks the snapshot's hash, so the data directory is no longer empty: a Bootstrap answers AlreadyExists and etcd will not start from it after a reboot"}
	case strings.Contains(ev, eventCrashLoop):
		return &etcdFact{HasData: true, Broken: true,
			Seen:   fmt.Sprintf("service etcd Failed since %s: etcd exits on every start (%q)", since, ev),
			Advice: "its data directory holds data etcd cannot run from (what a failed restore left, or a member another removed), and it stays so across reboots"}
	}
	return nil
}

// wipeCommand is the reset that wipes only a machine's EPHEMERAL
// partition (etcd's data, the uploaded snapshot, the containers' images)
// and keeps its config: talosctl v1.11.0 and v1.14.1
// cmd/talosctl/cmd/talos/reset.go flags. --graceful=false, since a
// graceful reset first leaves etcd, which a node whose etcd does not run
// cannot. devata has no command for it: devata remove wipes the whole
// system disk and takes the machine out of the cluster.
func wipeCommand(m *inventory.Machine) string {
	return fmt.Sprintf("talosctl -n %s reset --system-labels-to-wipe EPHEMERAL --reboot --graceful=false", m.Address)
}

// brokenVerdict names the control planes whose etcd failed on data it
// cannot start from, with why and the reset to run; "" when none.
func brokenVerdict(inv *inventory.Inventory, st *fleetState) string {
	var out []string
	for _, m := range inv.ControlPlanes() {
		f := st.etcd[m.Name]
		if !f.Broken {
			continue
		}
		out = append(out, fmt.Sprintf("%s: %s; %s. Wipe its EPHEMERAL partition, which keeps its config (devata has no command for this; devata remove would wipe the whole disk): %s; once it is back, run the command again",
			m.Name, f.Seen, f.Advice, wipeCommand(m)))
	}
	if len(out) == 0 {
		return ""
	}
	return "nothing was bootstrapped: " + strings.Join(out, "; ")
}

// joinFailedAdvice names the control planes whose etcd gave up joining,
// with what to do; "" when none.
func joinFailedAdvice(inv *inventory.Inventory, st *fleetState) string {
	var out []string
	for _, m := range inv.ControlPlanes() {
		if f := st.etcd[m.Name]; f.JoinFailed {
			out = append(out, fmt.Sprintf("%s: %s; it joins once it reboots: talosctl -n %s reboot (else Talos reboots it when its boot times out, 70 minutes after it booted)", m.Name, f.Seen, m.Address))
		}
	}
	return strings.Join(out, "; ")
}
