package sim

import (
	"maps"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	machinetype "github.com/siderolabs/talos/pkg/machinery/config/machine"

	"devata.dev/devata/internal/configview"
)

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
	// etcdLearner: the member ID it joins as while a learner (Machine.etcdLearner)
	etcdLearner uint64
	etcdSince   time.Time
	// etcdStopped, etcdRemoved: see Machine
	etcdStopped, etcdRemoved time.Time
	// etcdFailed, etcdFailure: see Machine
	etcdFailed  time.Time
	etcdFailure string
	role        string
	bootDone    bool
	node        nodeFacts
	// upgrading, stoppedAt, bootFailing: see Machine
	upgrading   bool
	stoppedAt   time.Time
	bootFailing bool
	// apiUp: an API server can run (some etcd cluster does); set by sync,
	// which may take the fleet's lock where snap may not.
	apiUp bool
	// manifestsFailing: the bootstrap manifests' apply fails (manifests_apply.go); set by sync
	manifestsFailing bool
	// restarts, restartDelay: see restart.go
	restarts     map[string]restart
	restartDelay time.Duration
	// etcdPrepare: see Options.EtcdPrepareDelay
	etcdPrepare time.Duration
	// boot: what the installer of the booted partition put there
	boot bootImage
	// extraManifests: the bodies of the config's cluster.extraManifests
	// this boot downloaded, by URL (manifests_extra.go)
	extraManifests map[string]string
}

func (m *Machine) snap() snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()

	s := snapshot{
		name:        m.name,
		host:        m.host,
		addr:        m.addr,
		version:     m.version,
		sysDisk:     m.sysDisk,
		down:        m.down || m.closed,
		booted:      m.booted,
		faults:      m.faults,
		active:      m.active,
		persisted:   m.persisted,
		etcdID:      m.etcdID,
		etcdLearner: m.etcdLearner,
		etcdSince:   m.etcdSince,
		etcdStopped: m.etcdStopped,
		etcdRemoved: m.etcdRemoved,
		etcdFailed:  m.etcdFailed,
		etcdFailure: m.etcdFailure,
		role:        m.role,
		bootDone:    m.bootDone,
		node:        m.node,

		upgrading:   m.upgrading,
		stoppedAt:   m.stoppedAt,
		bootFailing: m.bootFailing,

		restarts:     maps.Clone(m.restarts),
		restartDelay: m.fleet.restartDelay,
		etcdPrepare:  m.fleet.etcdPrepare,
		boot:         m.fleet.bootImageOf(m.installImage),
	}

	if s.faults.TalosVersion != "" {
		s.version = s.faults.TalosVersion
	}

	s.extraManifests = m.downloaded(s)

	return s
}

func (s snapshot) configured() bool { return s.active != nil }

// ephemeralDown: cri and the services that depend on it (kubelet, etcd)
// and trustd do not run, although the machine is up: an upgrade stopped
// them, or this boot fails before it starts them.
func (s snapshot) ephemeralDown() bool { return !s.stoppedAt.IsZero() || s.bootFailing }

// etcdRunning: the node holds etcd data and its etcd runs: not stopped by
// EtcdLeaveCluster, not failing because its member was removed.
func (s snapshot) etcdRunning() bool {
	return s.etcdID != 0 && s.etcdStopped.IsZero() && s.etcdRemoved.IsZero() && !s.down && !s.ephemeralDown() && !s.etcdPreparing()
}

// learnerRunning: the node was added to a cluster as a learner and its etcd
// runs as one until Talos promotes it (services/etcd.go: the PreFunc's
// addMember returned, the container started, promoteMember retries in the
// background).
func (s snapshot) learnerRunning() bool {
	return s.etcdID == 0 && s.etcdLearner != 0 && s.etcdStopped.IsZero() && s.etcdFailed.IsZero() && !s.down && !s.ephemeralDown()
}

// etcdPreparing: the node held etcd data when it booted and this boot's
// etcd service is still in its PreFunc (etcd_join.go). A node that got its
// data during this boot (bootstrapped, or a learner promoted) is past its
// PreFunc already.
func (s snapshot) etcdPreparing() bool {
	return s.etcdID != 0 && time.Since(s.booted) < s.etcdPrepare && !s.etcdSince.After(s.booted)
}

// cniNone reports a config that leaves the CNI to the operator
// (cluster.network.cni.name none).
func (s snapshot) cniNone() bool {
	if s.active == nil || s.active.Cluster() == nil {
		return false
	}

	return configview.CNI(s.active) == "none"
}

// hostname is the config's machine.network.hostname, else the machine's name.
func (s snapshot) hostname() string {
	if s.active != nil {
		if h := configview.Hostname(s.active); h != "" {
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
