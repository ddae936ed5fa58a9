package sim

import "time"

// Observation is one machine as the fleet itself sees it at one moment,
// without going through the Talos API: what a test needs to tell what a
// client did to the machine (a reboot) from what the test did to it (a
// fault). It changes nothing.
type Observation struct {
	// Down: a reboot or crash has the machine away (its reboot delay has
	// not passed), or it is up but its API does not serve yet (boot opens
	// it last, once the boot's state is in place: machine.go boot). Once
	// Down is false a new connection is served. The Unreachable fault is
	// not down: the machine runs, only its connections are dropped.
	Down bool
	// Reboots counts the reboots and crashes begun since Start; it grows
	// when the machine goes down, so a reboot shorter than a test's polling
	// interval is still seen.
	Reboots int
	// Booted is when the machine last came up (a time before Start for a
	// machine that never rebooted).
	Booted time.Time
	// TalosVersion is the version the machine runs (what Version reports
	// unless the TalosVersion fault says otherwise); InstallImage the
	// installer image that wrote its boot partition: its config's
	// machine.install.image (else the default installer of its version)
	// until an upgrade installs another.
	TalosVersion, InstallImage string
	// Upgrading: an upgrade sequence runs (MachineStatus stage upgrading).
	Upgrading bool
	// NextVersion is the version an installer wrote for the next boot to
	// load (LifecycleService.Upgrade, or an upgrade sequence about to
	// reboot), or a staged upgrade installs then; "" when the next boot
	// loads what runs now.
	NextVersion string
	// Images are the images the Kubernetes components run now, by
	// component (kubelet, kube-apiserver, kube-controller-manager,
	// kube-scheduler): the old one until the restart of a live change
	// begins (restart.go); none while the machine is down or unconfigured.
	Images map[string]string
}

// Observe returns the machine's Observation.
func (m *Machine) Observe() Observation {
	s := m.snap()

	m.mu.Lock()
	defer m.mu.Unlock()

	o := Observation{
		Down:    m.down || (m.session == nil && !m.faults.Unreachable && !m.closed),
		Reboots: m.bootGen, Booted: m.booted,
		TalosVersion: m.version, InstallImage: m.installImage, Upgrading: m.upgrading,
	}

	switch {
	case m.staged != nil:
		o.NextVersion = m.staged.version
	case m.next != nil:
		o.NextVersion = m.next.version
	}

	if !s.down && s.active != nil && s.active.Machine() != nil {
		o.Images = map[string]string{kubeletComponent: s.kubeletImage()}
		for _, p := range staticPodsOf(s) {
			o.Images[p.component] = p.image
		}
	}

	return o
}

// EtcdCluster is one etcd cluster of the fleet, by machine name.
type EtcdCluster struct {
	// Members are the voting members; Learners joined but are not yet
	// promoted.
	Members, Learners []string
	// Revision is the key space's revision, what a snapshot of the cluster
	// carries (etcdutl snapshot status reads it).
	Revision int64
}

// EtcdClusters returns every etcd cluster the fleet holds, in the order
// they were bootstrapped. A healthy cluster has exactly one: a second
// means Bootstrap ran on a control plane without etcd data and split etcd.
func (f *Fleet) EtcdClusters() []EtcdCluster {
	f.mu.Lock()
	defer f.mu.Unlock()

	out := make([]EtcdCluster, 0, len(f.etcd))

	for _, c := range f.etcd {
		ec := EtcdCluster{Revision: c.revision}

		for _, mem := range c.members {
			if mem.learner {
				ec.Learners = append(ec.Learners, mem.m.name)
			} else {
				ec.Members = append(ec.Members, mem.m.name)
			}
		}

		out = append(out, ec)
	}

	return out
}
