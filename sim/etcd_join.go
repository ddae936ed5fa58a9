package sim

import (
	"time"
)

// etcdJoinFailure is the etcd service's event when its PreFunc gave up
// joining: buildInitialCluster's retry.Constant(constants.EtcdJoinTimeout)
// ends with go-retry's TimeoutError ("timeout"), wrapped by
// buildInitialCluster and argsForControlPlane, and the service runner
// fails the service with it, capitalised (Talos v1.11.0 and v1.14.1
// services/etcd.go buildInitialCluster, argsForControlPlane;
// system/service_runner.go Start, system/system.go Start).
const etcdJoinFailure = "Failed to run pre stage: failed to build initial etcd cluster: failed to build cluster arguments: timeout"

// etcdCrashLoop is the etcd service of a node whose data directory holds
// what a failed restore wrote: etcd exits as it starts, and the runner
// restarts it for ever (Containerd runner with restart.Forever).
const etcdCrashLoop = "Error running Containerd(etcd), going to restart forever: task \"etcd\" failed: exit code 1"

// etcdDataDirFull reports what Bootstrap checks first (v1alpha1_server.go
// Bootstrap, os.ReadDir(constants.EtcdDataPath)): the node's etcd data
// directory is not empty, because its etcd ran or a failed restore wrote
// its database there.
func (m *Machine) etcdDataDirFull() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.etcdID != 0 || m.etcdDataLeft != ""
}

// crashLoopLocked starts a boot's etcd on what a failed restore left: the
// data directory is not empty, so the PreFunc neither joins nor waits
// (argsForControlPlane builds no initial cluster), and etcd, given a
// database without the WAL etcdutl writes only after the hash check
// (v3_snapshot.go Restore: saveDB, then saveWALAndSnap), exits. The sim
// does not model which check etcd fails on; it only never starts. The
// caller holds m.mu.
func (m *Machine) crashLoopLocked() {
	if m.etcdDataLeft == "" || m.etcdID != 0 {
		return
	}

	m.etcdFailed, m.etcdFailure = time.Now(), etcdCrashLoop
}

// armBootTimers starts the clocks of a configured boot. A control plane
// that holds etcd data passes through the etcd service's PreFunc on every
// boot (services/etcd.go PreFunc: image.Pull with WithSkipIfAlreadyPulled,
// then waitPKI) for the fleet's EtcdPrepareDelay, Preparing "Running pre
// state" as a node without data shows it (snapshot.etcdPreparing). Then
// the two timeouts (v1alpha1_sequencer_tasks.go StartAllServices): a
// control plane whose
// etcd service still waits in its PreFunc after the fleet's join timeout
// fails it, with no restart (joinTimedOut); a boot whose services are not
// all up after the boot timeout fails, and machined reboots the machine
// (main.go handle: revertBootloader, then the reboot), which starts both
// clocks again.
func (m *Machine) armBootTimers(gen int) {
	f := m.fleet

	// a node with data starts etcd once its PreFunc is through: what
	// follows from it running (the boot's end, the stage) is computed anew
	time.AfterFunc(f.etcdPrepare, func() {
		if m.bootGeneration() == gen {
			m.sync()
		}
	})

	time.AfterFunc(f.joinTimeout, func() { m.joinTimedOut(gen) })
	time.AfterFunc(f.bootTimeout, func() { m.bootTimedOut(gen) })
}

// joinTimedOut fails the etcd service of a control plane that neither was
// bootstrapped nor joined within the join timeout of boot gen. A node
// added as a learner is past buildInitialCluster: its join does not time
// out.
func (m *Machine) joinTimedOut(gen int) {
	cp := m.snap().controlPlane()

	m.mu.Lock()
	waiting := cp && gen == m.bootGen && !m.down && !m.closed && m.active != nil &&
		m.etcdID == 0 && m.etcdDataLeft == "" && m.etcdCluster == nil && m.etcdFailed.IsZero() && m.etcdStopped.IsZero()

	if waiting {
		m.etcdFailed, m.etcdFailure = time.Now(), etcdJoinFailure
		m.joinGen++
	}
	m.mu.Unlock()

	if waiting {
		m.fleet.log.Warn("sim: etcd gave up joining: the service failed and is not restarted", "machine", m.name, "after", m.fleet.joinTimeout)
		m.sync()
	}
}

// bootTimedOut fails boot gen when its services were not all up within
// the boot timeout: the machine reboots.
func (m *Machine) bootTimedOut(gen int) {
	m.mu.Lock()
	failed := gen == m.bootGen && !m.down && !m.closed && m.active != nil && !m.bootDone && !m.upgrading

	if failed && m.fallback != nil {
		m.next, m.fallback = m.fallback, nil // revertBootloader
	}
	m.mu.Unlock()

	if failed {
		m.fleet.log.Warn("sim: boot sequence failed: not every service was up within the boot timeout; rebooting", "machine", m.name, "after", m.fleet.bootTimeout)
		m.reboot(false)
	}
}
