package sim

import (
	"bytes"
	"context"
	"crypto/tls"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
)

// Machine is one simulated Talos node.
type Machine struct {
	fleet   *Fleet
	name    string
	role    string // from the spec; the config's machine.type wins once configured
	version string
	sysDisk SystemDisk    // the hardware's system disk
	st      state.State   // COSI resources as the sim writes them
	cosi    *server.State // the same, behind machined's access policy

	managed map[key]struct{} // resources sync wrote, guarded by syncMu

	membersMu sync.Mutex
	members   map[key]struct{} // Member resources syncMembers wrote

	kubeletMu  sync.Mutex
	kubeletSrv *kubeletServer // started by the first kubelet sync
	// when this machine's kubelet last posted its Node status and renewed
	// its Lease (kubelet.go: each on its own clock), guarded by kubeletMu
	statusReported, leaseRenewed time.Time

	certMu sync.Mutex
	cert   *tls.Certificate // issued on the first mTLS handshake

	callsMu sync.Mutex
	calls   map[string]int

	pullsMu sync.Mutex
	pulls   []ImagePull // MachineService.ImagePull's, in order (kubepull.go)

	syncMu sync.Mutex // serialises writes of derived resources

	extra extraManifests // cluster.extraManifests downloaded (manifests_extra.go)

	mu        sync.Mutex
	addr      string
	host      string
	ln        *machineListener // open from Start to Close
	session   *session         // nil while down or unreachable
	draining  []*session       // ended by a reboot, dropped at the latest when it is over
	inflight  atomic.Int32     // calls this machine serves as endpoint
	down      bool             // rebooting
	closed    bool
	bootGen   int
	booted    time.Time
	faults    Faults
	active    config.Provider // nil: maintenance mode
	persisted config.Provider
	tryTimer  *time.Timer
	etcdID    uint64 // non-zero once the machine's etcd ran: it holds etcd data
	// etcdCluster is the cluster the machine is a member of, or joins as a
	// learner; joinGen tells a join in flight from a later one.
	etcdCluster *etcdCluster
	// etcdLearner is the member ID the machine joins as, while it is a
	// learner not yet promoted (its etcd runs as one when the machine is up)
	etcdLearner uint64
	// etcdSince is when the machine's etcd got its data (bootstrapped,
	// promoted): a boot after it starts on that data, Preparing first
	etcdSince time.Time
	// events is what its machined published (events.go)
	events  eventsLog
	joinGen int
	// etcdStopped: when EtcdLeaveCluster stopped the etcd service and
	// deleted its data (etcd.go Client.LeaveCluster); it stays stopped
	// until the next boot. etcdRemoved: when the member was removed from
	// its cluster by another node (EtcdRemoveMemberByID) while this one
	// holds its data: etcd exits "the member has been permanently removed
	// from the cluster" and the service runner restarts it, failing, for
	// ever. Zero: not so.
	etcdStopped, etcdRemoved time.Time
	// halted: a Reset without reboot shut the machine down; it stays down
	// until PowerOn.
	halted bool
	// recovery is the snapshot EtcdRecover uploaded
	// (/var/lib/etcd.snapshot), removed once a recovery restored it;
	// etcdFailed and etcdFailure: when and why the etcd service failed to
	// start (a recovery that did not restore), until the next boot or
	// bootstrap.
	recovery    []byte
	etcdFailed  time.Time
	etcdFailure string
	// etcdDataLeft is why the etcd data directory holds what a failed
	// restore wrote (etcd_recover.go), empty when it does not: Bootstrap
	// answers AlreadyExists, etcd fails on every boot, and only a wipe of
	// EPHEMERAL clears it.
	etcdDataLeft string
	// bootDone is set once every service of this boot was up: the end of
	// machined's boot sequence (StartAllServices), when the stage turns
	// running. A reboot clears it.
	bootDone bool
	// node is the Kubernetes Node as its kubelet last posted it.
	node nodeFacts
	// The A/B boot (upgrade.go): installImage is the installer image the
	// running system came from; staged is a staged upgrade, installed by
	// the next boot; next is the partition the next boot loads when an
	// installer wrote another one; fallback the one it replaced, which a
	// failing boot reverts to.
	installImage           string
	staged, next, fallback *bootEntry
	// installed: the system disk holds a Talos install (its boot
	// partition), as runtime.MachineState.Installed says; a machine
	// started in maintenance mode booted its install medium, and a reset
	// that wipes the whole system disk loses the install.
	installed bool
	// upgrading: an upgrade sequence runs (stage upgrading); stoppedAt:
	// when it stopped cri and the services that depend on it.
	upgrading bool
	stoppedAt time.Time
	// bootFailing: this boot's boot sequence fails before its services
	// start (UpgradeBootFails on a new version's first boot).
	bootFailing bool
	// restarts are the live config changes that restart the kubelet or a
	// control plane static pod, by component (restart.go).
	restarts map[string]restart
	// images are the containerd image stores, by instance and namespace,
	// each the installer images pulled into it by name (containerd.go).
	images map[containerdStore]map[string]pulledImage
	// installerLocked: LifecycleService runs an installer (lifecycle.go
	// Service.lock); machined starts afresh with every boot.
	installerLocked bool
}

// nodeFacts are what Talos' NodeStatus resource carries for the
// MachineStatus nodeReady check.
type nodeFacts struct {
	seen, ready bool
}

// Running reports whether the machine is configured, up, and past the end
// of its boot sequence: what MachineStatus shows as stage running.
func (m *Machine) Running() bool {
	s := m.snap()

	return s.configured() && !s.down && s.bootDone
}

// Configured reports whether the machine has a config (is out of
// maintenance mode).
func (m *Machine) Configured() bool { return m.snap().configured() }

// Name returns the machine's name.
func (m *Machine) Name() string { return m.name }

// Addr returns the host:port the machine listens on.
func (m *Machine) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.addr
}

// Calls counts the calls that reached this machine (as endpoint or as a
// routed target), whether or not they were then refused, by short method
// name ("ApplyConfiguration", "Get"), by service and method
// ("MachineService.Upgrade", "LifecycleService.Upgrade",
// "ImageService.Pull", "State.Get") and by full name
// ("/cosi.resource.State/Get"). A short name counts every service's
// method of that name: "Upgrade" is MachineService.Upgrade and
// LifecycleService.Upgrade together, which the service's name tells
// apart. A call to a service the machine's Talos does not have (an
// ImageService.Pull on Talos 1.12) is counted too. Calls lost to
// Unreachable or to an injected error code are not counted. Dry-run
// applies are also counted as "ApplyConfiguration(dry-run)", so writes
// are the difference of the two.
func (m *Machine) Calls(method string) int {
	m.callsMu.Lock()
	defer m.callsMu.Unlock()

	return m.calls[method]
}

func (m *Machine) count(method string) {
	m.callsMu.Lock()
	m.calls[method]++
	m.callsMu.Unlock()
}

// Faults returns the faults in force.
func (m *Machine) Faults() Faults {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.faults.clone()
}

// SetFaults replaces the machine's faults.
func (m *Machine) SetFaults(f Faults) {
	f = f.clone()

	var drifted config.Provider

	if len(f.DriftedConfig) > 0 {
		cfg, err := configloader.NewFromBytes(f.DriftedConfig)
		if err != nil {
			m.fleet.log.Error("sim: drifted config does not load; ignored", "machine", m.name, "error", err)

			f.DriftedConfig = nil
		} else {
			drifted = cfg
		}
	}

	m.mu.Lock()
	prev := m.faults
	m.faults = f

	if drifted != nil && !bytes.Equal(prev.DriftedConfig, f.DriftedConfig) && m.active != nil {
		m.active, m.persisted = drifted, drifted
	}

	var stop *session

	switch {
	case f.Unreachable && m.session != nil:
		stop, m.session = m.session, nil
	case !f.Unreachable && m.session == nil && !m.down && !m.closed:
		m.openLocked()
	}
	m.mu.Unlock()

	if stop != nil {
		stop.stop() // unreachable from the moment SetFaults returns
	}

	m.sync()
}

// Crash drops every connection at once; the machine comes back after the
// reboot delay with its persisted config: a TRY config is gone, a staged one
// is active.
func (m *Machine) Crash() {
	m.reboot(false)
}

// reboot takes the machine away for the reboot delay. A graceful reboot lets
// the call that asked for it reply first, as machined does.
func (m *Machine) reboot(graceful bool) {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()

		return
	}

	sess := m.session
	m.session = nil
	m.down = true
	m.bootGen++
	gen := m.bootGen

	if m.tryTimer != nil {
		m.tryTimer.Stop()
		m.tryTimer = nil
	}

	// an upgrade sequence in flight ends with the boot it ran in, and
	// machined and the system containerd start afresh
	m.upgrading, m.stoppedAt, m.bootFailing = false, time.Time{}, false
	m.installerLocked = false
	m.forgetImagesLocked(false)

	if sess != nil {
		m.draining = append(m.draining, sess)
	}
	m.mu.Unlock()

	switch {
	case sess == nil:
	case graceful:
		sess.stopGracefully()
	default:
		sess.stop()
	}

	time.AfterFunc(m.fleet.rebootDelay, func() { m.boot(gen) })
}

func (m *Machine) boot(gen int) {
	// A reboot asked for by a call (an apply, an upgrade, a reboot) lets
	// that call's reply go out first (stopGracefully): on Talos the reply
	// always arrives, because the reboot takes far longer than a reply.
	// A boot shorter than that wait (the tests' RebootDelay of 50 ms) would
	// drop the connection under the reply: the machine comes up only once
	// the replies of its last boot are out.
	m.mu.Lock()
	draining := slices.Clone(m.draining)
	m.mu.Unlock()

	for _, sess := range draining {
		sess.waitEnded(2 * time.Second)
	}

	m.mu.Lock()
	if m.closed || gen != m.bootGen {
		m.mu.Unlock()

		return
	}

	// a staged upgrade installs and boots once more before coming up
	if again, ok := m.loadBootEntryLocked(); ok {
		m.bootGen++
		next := m.bootGen
		m.mu.Unlock()

		time.AfterFunc(again, func() { m.boot(next) })

		return
	}

	// nothing from before the reboot survives it
	draining = m.draining
	m.draining = nil
	m.down = false
	m.active = m.persisted
	m.booted = time.Now()
	m.bootDone = false
	// machined's NodeStatus is gone with the boot: it is read again from
	// the Node once the kubelet runs (kubelet.go noteNode)
	m.node = nodeFacts{}
	m.etcdStopped = time.Time{}
	m.etcdFailed, m.etcdFailure = time.Time{}, ""
	m.crashLoopLocked()
	failing := m.bootFailing
	m.mu.Unlock()

	m.armBootTimers(gen)

	for _, sess := range draining {
		sess.stop()
	}

	if failing {
		time.AfterFunc(m.fleet.rebootDelay, func() { m.failBoot(gen) })
	} else {
		m.fleet.joinEtcd(m)
	}

	m.sync()

	m.mu.Lock()
	if !m.faults.Unreachable && m.session == nil && !m.closed {
		m.openLocked()
	}
	m.mu.Unlock()
}

// openLocked starts a session in the machine's current mode: from now on
// its listener admits connections again.
func (m *Machine) openLocked() {
	if m.active == nil {
		m.session = newSession(m, m.fleet.maintenanceTLS, true)
	} else {
		m.session = newSession(m, m.fleet.configuredTLS, false)
	}
}

func (m *Machine) close() {
	m.mu.Lock()
	m.closed = true
	sessions := append(m.draining, m.session)
	m.session = nil
	m.draining = nil

	if m.tryTimer != nil {
		m.tryTimer.Stop()
	}
	m.mu.Unlock()

	m.ln.Close() //nolint:errcheck
	m.closeKubelet()

	for _, s := range sessions {
		if s != nil {
			s.stop()
		}
	}
}

// certificate is the machine's server certificate for mTLS.
func (m *Machine) certificate() (*tls.Certificate, error) {
	m.certMu.Lock()
	defer m.certMu.Unlock()

	if m.cert == nil {
		cert, err := m.fleet.ca.serverCert(m.host)
		if err != nil {
			m.fleet.log.Error("sim: server certificate", "machine", m.name, "error", err)

			return nil, err
		}

		m.cert = &cert
	}

	return m.cert, nil
}

func (m *Machine) etcdMemberID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.etcdID
}

// bootGeneration counts the machine's boots and shutdowns: a timer set
// during one boot checks it to act only in that boot.
func (m *Machine) bootGeneration() int {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.bootGen
}

// isReadyControlPlane: configured as a control plane and up.
func (m *Machine) isReadyControlPlane() bool {
	s := m.snap()

	return !s.down && s.configured() && s.controlPlane()
}

// waitGone blocks until the call's connection dropped (or a second passed).
func waitGone(ctx context.Context) {
	select {
	case <-ctx.Done():
	case <-time.After(time.Second):
	}
}
