package sim

import (
	"bytes"
	"context"
	"crypto/tls"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"
	"google.golang.org/grpc/codes"
)

// Faults are injected into one machine. The zero value is a healthy machine.
type Faults struct {
	// Unreachable drops the machine's connections and closes each new one as
	// soon as it is accepted (the port stays the machine's), so calls fail
	// with Unavailable; apid routing to it fails the same way.
	Unreachable bool
	// Latency delays every call the machine serves.
	Latency time.Duration
	// ErrorCodes fails calls with the given code, by short method name
	// ("Version", "Get", …) or, where a short name is ambiguous ("List" is
	// both COSI's and MachineService's), by full name
	// ("/cosi.resource.State/List").
	ErrorCodes map[string]codes.Code
	// DriftedConfig replaces the machine's config behind devata's back when it
	// is set (or changed), as an out-of-band `talosctl apply-config
	// --mode=no-reboot` would: active and persisted alike. A later apply
	// undoes the drift like any other config change. A machine in maintenance
	// mode has no config to drift and ignores it.
	DriftedConfig []byte
	// TalosVersion overrides the version the machine reports.
	TalosVersion string
	// KubeletUnhealthy marks the kubelet service unhealthy and the machine
	// status not ready.
	KubeletUnhealthy bool
	// VolumeFailed fails user volumes by name with an error message, in
	// phase provisioned, as a partition that existed before this boot and
	// then failed would.
	VolumeFailed map[string]string
	// VolumeMissing drops user volumes by name, as if never configured.
	VolumeMissing []string
	// VolumeFilesystem is what blkid finds on user volumes' existing
	// partitions, by name ("ext4", …), as a disk formatted earlier by
	// someone else would hold. Talos' Format keeps the same filesystem,
	// formats a blank one, and fails any other with "filesystem type
	// mismatch: <found> != <wanted>" (sim/storage.go, storageOf).
	VolumeFilesystem map[string]string
	// VolumeSize gives user volumes' existing partitions another size in
	// bytes, by name.
	VolumeSize map[string]uint64
	// DisksMissing takes disks away by device path ("/dev/sdb"), as if pulled
	// or dead: a user volume whose selector then matches no disk fails while
	// waiting, with Talos' "no disks matched selector for volume".
	DisksMissing []string
	// DiskSignatures leaves a signature ("xfs", "bluestore", …) on disks by
	// device path, as an earlier use would: the disk stops being blank, and
	// a volume that must be carved from it fails to find a disk, as
	// CheckDiskForProvisioning refuses any signature but gpt.
	DiskSignatures map[string]string
	// MountMissing leaves volumes ready but unmounted: user volumes by name,
	// machine.disks partitions by mount point.
	MountMissing []string
	// PartitionMissing drops machine.disks partitions by mount point, as if
	// never provisioned.
	PartitionMissing []string
	// KubeletMountMissing drops kubelet extraMounts by destination from the
	// KubeletSpec, as a kubelet started before the config had them would.
	KubeletMountMissing []string
	// KubeletMountOptions replaces the options of kubelet extraMounts by
	// destination, e.g. {"/var/mnt/longhorn": {"bind", "rw"}} (not rshared).
	KubeletMountOptions map[string][]string
	// RebootDuringApply makes the next non-dry-run ApplyConfiguration persist
	// the config, then drop the connection and reboot before replying. It
	// clears itself once it fired.
	RebootDuringApply bool

	// CiliumAgentNotReady keeps the node's cilium agent pod Running but not
	// Ready (ContainersNotReady).
	CiliumAgentNotReady bool
	// CiliumStatusReply replaces the agent's `cilium-dbg status -o json`
	// reply verbatim, e.g. with an older Cilium's shape.
	CiliumStatusReply string
	// CiliumControllersFailing names agent controllers that keep failing.
	CiliumControllersFailing []string
	// CiliumBackendsMissing names Services ("default/kubernetes") whose
	// frontends in the agent lack the last backend of their EndpointSlices.
	CiliumBackendsMissing []string
	// CiliumFrontendsStuck names Services whose frontends the agent never
	// reconciles: status Pending, or Error with the message when one is given.
	CiliumFrontendsStuck map[string]string
	// CiliumNoShell makes `cilium-dbg shell` fail, as on an agent built
	// without the statedb shell: only `service list` shows frontends.
	CiliumNoShell bool
	// CiliumPodNetworkBroken makes connections from the node's pod network
	// time out although every agent-side fact looks right: a datapath
	// failure only a transaction (devata drift --probe) sees.
	CiliumPodNetworkBroken bool
}

func (f Faults) clone() Faults {
	f.ErrorCodes = maps.Clone(f.ErrorCodes)
	f.CiliumControllersFailing = slices.Clone(f.CiliumControllersFailing)
	f.CiliumBackendsMissing = slices.Clone(f.CiliumBackendsMissing)
	f.CiliumFrontendsStuck = maps.Clone(f.CiliumFrontendsStuck)
	f.VolumeFailed = maps.Clone(f.VolumeFailed)
	f.VolumeMissing = slices.Clone(f.VolumeMissing)
	f.VolumeFilesystem = maps.Clone(f.VolumeFilesystem)
	f.VolumeSize = maps.Clone(f.VolumeSize)
	f.DisksMissing = slices.Clone(f.DisksMissing)
	f.DiskSignatures = maps.Clone(f.DiskSignatures)
	f.MountMissing = slices.Clone(f.MountMissing)
	f.PartitionMissing = slices.Clone(f.PartitionMissing)
	f.KubeletMountMissing = slices.Clone(f.KubeletMountMissing)
	f.KubeletMountOptions = maps.Clone(f.KubeletMountOptions)
	f.DriftedConfig = bytes.Clone(f.DriftedConfig)

	return f
}

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

	certMu sync.Mutex
	cert   *tls.Certificate // issued on the first mTLS handshake

	callsMu sync.Mutex
	calls   map[string]int

	syncMu sync.Mutex // serialises writes of derived resources

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
	joinGen     int
	// bootDone is set once every service of this boot was up: the end of
	// machined's boot sequence (StartAllServices), when the stage turns
	// running. A reboot clears it.
	bootDone bool
	// node is the Kubernetes Node as its kubelet last posted it.
	node nodeFacts
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
// name ("ApplyConfiguration", "Get") and by full name
// ("/cosi.resource.State/Get"). Calls lost to Unreachable or to an injected
// error code are not counted. Dry-run applies are also counted as
// "ApplyConfiguration(dry-run)", so writes are the difference of the two.
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
	m.mu.Lock()
	if m.closed || gen != m.bootGen {
		m.mu.Unlock()

		return
	}

	// nothing from before the reboot survives it
	draining := m.draining
	m.draining = nil
	m.down = false
	m.active = m.persisted
	m.booted = time.Now()
	m.bootDone = false
	m.mu.Unlock()

	for _, sess := range draining {
		sess.stop()
	}

	m.fleet.joinEtcd(m)
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

// snapshot is a consistent copy of what handlers read.
type snapshot struct {
	name      string
	host      string
	addr      string
	version   string
	sysDisk   SystemDisk
	down      bool
	booted    time.Time
	faults    Faults
	active    config.Provider
	persisted config.Provider
	etcdID    uint64
	role      string
	bootDone  bool
	node      nodeFacts
	// apiUp: an API server can run (some etcd cluster does); set by sync,
	// which may take the fleet's lock where snap may not.
	apiUp bool
}

func (m *Machine) snap() snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()

	s := snapshot{
		name:      m.name,
		host:      m.host,
		addr:      m.addr,
		version:   m.version,
		sysDisk:   m.sysDisk,
		down:      m.down || m.closed,
		booted:    m.booted,
		faults:    m.faults,
		active:    m.active,
		persisted: m.persisted,
		etcdID:    m.etcdID,
		role:      m.role,
		bootDone:  m.bootDone,
		node:      m.node,
	}

	if s.faults.TalosVersion != "" {
		s.version = s.faults.TalosVersion
	}

	return s
}

func (s snapshot) configured() bool { return s.active != nil }

// cniNone reports a config that leaves the CNI to the operator
// (cluster.network.cni.name none).
func (s snapshot) cniNone() bool {
	if s.active == nil || s.active.Cluster() == nil || s.active.Cluster().Network() == nil || s.active.Cluster().Network().CNI() == nil {
		return false
	}

	return s.active.Cluster().Network().CNI().Name() == "none"
}

// hostname is the config's machine.network.hostname, else the machine's name.
func (s snapshot) hostname() string {
	if s.active != nil && s.active.Machine() != nil && s.active.Machine().Network() != nil {
		if h := s.active.Machine().Network().Hostname(); h != "" {
			return h
		}
	}

	return s.name
}

// controlPlane reports the machine type from the active config, or the
// spec's role while unconfigured.
func (s snapshot) controlPlane() bool {
	if s.active != nil && s.active.Machine() != nil {
		t := s.active.Machine().Type()

		return t == machinetype.TypeControlPlane || t == machinetype.TypeInit
	}

	return s.role == "controlplane"
}

func (m *Machine) etcdMemberID() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.etcdID
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
