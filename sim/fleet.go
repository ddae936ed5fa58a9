package sim

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"sync"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/cosi-project/runtime/pkg/state/protobuf/server"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	timeapi "github.com/siderolabs/talos/pkg/machinery/api/time"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"
)

// Options describe a fleet to serve.
type Options struct {
	// Bundle is the cluster's secrets bundle: its OS CA signs the machines'
	// server certificates and verifies client certificates.
	Bundle *secrets.Bundle
	// Machines to serve, in order.
	Machines []MachineSpec
	// RebootDelay is how long a reboot or crash takes a machine away (default 2s).
	RebootDelay time.Duration
	// UpgradeDelay is how long an upgrade sequence runs before its reboot:
	// it drains for the first half, then runs with cri, kubelet, etcd and
	// trustd stopped while the installer writes the other boot partition.
	// A staged upgrade's install takes as long at the next boot (default:
	// RebootDelay; on Talos, minutes).
	UpgradeDelay time.Duration
	// Logger receives the fleet's own log lines (default: discarded).
	Logger *slog.Logger
	// EtcdJoinDelay is how long a control plane without etcd data takes to
	// join an existing etcd cluster: it is a learner with an empty name for
	// that long, then a started, promoted member (default 300ms; Talos takes
	// seconds: services/etcd.go buildInitialCluster retries every 3s).
	EtcdJoinDelay time.Duration
	// EtcdClientWait is how long EtcdMemberList and EtcdStatus wait on a
	// control plane whose etcd does not run before they fail with
	// DeadlineExceeded, unless the caller's deadline comes first (default
	// 2s; Talos' etcd client waits until the caller's deadline).
	EtcdClientWait time.Duration
	// EtcdNoLeaderWait is how long EtcdMemberList takes to fail
	// "etcdserver: no leader" on a member whose cluster has no quorum:
	// Talos' etcd client retries the refusal 100 times, 25ms apart
	// (default 2.5s, as on Talos; see memberListNoLeader).
	EtcdNoLeaderWait time.Duration
	// CRIStartDelay is how long after a boot the CRI service and the etcd
	// admin certificates take to appear: until then Bootstrap answers
	// FailedPrecondition "bootstrap is not available yet" and etcd calls
	// fail building the client's TLS config (default 500ms; on Talos,
	// seconds).
	CRIStartDelay time.Duration
	// RestartDelay is how long the kubelet, or a control plane static pod
	// (kube-apiserver, kube-controller-manager, kube-scheduler), takes to
	// restart after a live config change gave it a new spec; the restart
	// begins a quarter of it after the apply, as machined's controllers
	// react (default 1s; on Talos, seconds to a minute). See restart.go.
	RestartDelay time.Duration
	// Schematics are the schematics the simulated Image Factory holds, by
	// id (schematic.go): its installers of any other schematic but the
	// empty one are not found.
	Schematics map[string]Schematic
	// InstallerPullDelay is how long a pull of an installer image takes
	// (download, unpack and, for MachineService.Upgrade, the `installer
	// --help` check): inside MachineService.Upgrade before it answers,
	// and inside ImageService.Pull while it streams progress, both under
	// the caller's context, so a deadline that comes first cancels the
	// pull and nothing starts (pull.go). Faults.InstallerPullDelay
	// replaces it per machine (default 100ms; on Talos seconds to
	// minutes: an installer is a few hundred MB).
	InstallerPullDelay time.Duration
	// CNIStartDelay is how long after a boot the cilium agent pod already
	// on a node takes to run again and write its CNI config: until then
	// the node's kubelet reports its Node NotReady
	// (NetworkPluginNotReady) and the agent pod not Ready (default 2s; on
	// Talos tens of seconds). See cilium_pods.go agentRunning.
	CNIStartDelay time.Duration
	// EtcdJoinTimeout is how long a control plane without etcd data waits
	// in the etcd service's PreFunc to be bootstrapped or to join before
	// the service fails, not restarted (constants.EtcdJoinTimeout, default
	// 30m as on Talos; etcd_join.go).
	EtcdJoinTimeout time.Duration
	// BootTimeout is how long the boot sequence waits for every service
	// to be up before it fails and the machine reboots
	// (constants.BootTimeout, default 70m as on Talos; etcd_join.go).
	BootTimeout time.Duration
	// EtcdPrepareDelay is how long a control plane that holds etcd data
	// spends in the etcd service's PreFunc on every boot (the etcd image
	// pull, skipped once pulled, and the PKI) before etcd starts: its
	// service is Preparing "Running pre state" as on a node without data
	// (default 200ms; on Talos seconds; etcd_join.go).
	EtcdPrepareDelay time.Duration
}

// MachineSpec describes one simulated machine.
type MachineSpec struct {
	// Name identifies the machine (a `node` target may name it); it is the
	// machine's hostname unless its config sets machine.network.hostname.
	Name string
	// Role is "controlplane" or "worker" (the default). Once a config is
	// applied its machine.type wins; Role only matters while the machine has
	// no config.
	Role string
	// Address to listen on, host:port (default "127.0.0.1:0").
	Address string
	// Config is the applied machine config (multi-document YAML); nil starts
	// the machine in maintenance mode.
	Config []byte
	// TalosVersion is the version the machine runs at Start (default
	// "v1.11.0"); an Upgrade installs another.
	TalosVersion string
	// SystemDisk is the hardware's system disk (default /dev/sda, solid
	// state); SystemDiskFor picks one an inventory's install disk or
	// selector matches. A config's machine.install.disk names it once
	// applied.
	SystemDisk SystemDisk
}

// SystemDisk is a simulated machine's system disk. Its Disk resource's
// transport follows the device name as the kernel's does: nvme* is nvme,
// mmcblk* mmc, vd* virtio, anything else sata.
type SystemDisk struct {
	Device     string
	Rotational bool
}

// SystemDiskFor is a system disk that the inventory's installDisk, or its
// installDiskSelector type, would match (machinery v1alpha1_provider.go,
// InstallDiskSelector.Expression: type nvme is transport nvme, sd is mmc,
// hdd is rotational, ssd is not).
func SystemDiskFor(installDisk, selectorType string) SystemDisk {
	switch {
	case installDisk != "":
		return SystemDisk{Device: installDisk}
	case selectorType == "nvme":
		return SystemDisk{Device: "/dev/nvme0n1"}
	case selectorType == "sd":
		return SystemDisk{Device: "/dev/mmcblk0"}
	case selectorType == "hdd":
		return SystemDisk{Device: "/dev/sda", Rotational: true}
	default:
		return SystemDisk{Device: "/dev/sda"}
	}
}

// Fleet is a running set of simulated machines.
type Fleet struct {
	// syncMu makes one SyncKubelets at a time: the kubelets' own loop and
	// a test's explicit call would otherwise create the same agent pod and
	// update the same Deployment status at once
	syncMu         sync.Mutex
	log            *slog.Logger
	rebootDelay    time.Duration
	upgradeDelay   time.Duration
	joinDelay      time.Duration
	etcdWait       time.Duration
	noLeaderWait   time.Duration // see Options.EtcdNoLeaderWait
	criDelay       time.Duration // see Options.CRIStartDelay
	restartDelay   time.Duration // see Options.RestartDelay
	pullDelay      time.Duration // see Options.InstallerPullDelay
	cniDelay       time.Duration // see Options.CNIStartDelay
	joinTimeout    time.Duration // see Options.EtcdJoinTimeout
	bootTimeout    time.Duration // see Options.BootTimeout
	etcdPrepare    time.Duration // see Options.EtcdPrepareDelay
	ca             *authority
	grpc           *grpc.Server    // serves every machine's listeners
	maintenanceTLS *tls.Config     // shared: one self-signed certificate
	configuredTLS  *tls.Config     // shared: picks the machine's own certificate
	meta           state.CoreState // the `meta` namespace, shared by every machine

	mu       sync.Mutex
	machines []*Machine
	byName   map[string]*Machine
	byAddr   map[string]*Machine
	byHost   map[string][]*Machine
	etcd     []*etcdCluster // in the order they were bootstrapped
	// served are the snapshots EtcdSnapshot streamed, by the sha256 of
	// their database: what a recovery from one restores (etcd_recover.go).
	served map[[32]byte]servedSnapshot
	// clustersMade counts the etcd clusters ever bootstrapped: each gets
	// member IDs of its own
	clustersMade int
	closed       bool
	kube         kubernetes.Interface // the API server the kubelets post to, once they have
	agents       map[string]*agentPod // cilium agent pods by machine name
	// manifestFailure: the error of ManifestApplyController's last run;
	// manifestsApplied: one run succeeded (manifests_apply.go)
	manifestFailure  string
	manifestsApplied bool
	// schematics: see Options.Schematics and CreateSchematic
	schematicsMu sync.RWMutex
	schematics   map[string]Schematic
}

// setDefaults fills the delays and timeouts o leaves at zero.
func (o *Options) setDefaults() {
	if o.RebootDelay <= 0 {
		o.RebootDelay = 2 * time.Second
	}

	if o.UpgradeDelay <= 0 {
		o.UpgradeDelay = o.RebootDelay
	}

	if o.EtcdJoinDelay <= 0 {
		o.EtcdJoinDelay = 300 * time.Millisecond
	}

	if o.EtcdClientWait <= 0 {
		o.EtcdClientWait = 2 * time.Second
	}

	if o.EtcdNoLeaderWait <= 0 {
		o.EtcdNoLeaderWait = etcdRetries * etcdRetryBackoff
	}

	if o.CRIStartDelay <= 0 {
		o.CRIStartDelay = 500 * time.Millisecond
	}

	if o.RestartDelay <= 0 {
		o.RestartDelay = time.Second
	}

	if o.InstallerPullDelay <= 0 {
		o.InstallerPullDelay = 100 * time.Millisecond
	}

	if o.CNIStartDelay <= 0 {
		o.CNIStartDelay = 2 * time.Second
	}
	if o.EtcdJoinTimeout <= 0 {
		o.EtcdJoinTimeout = 30 * time.Minute
	}

	if o.BootTimeout <= 0 {
		o.BootTimeout = 70 * time.Minute
	}

	if o.EtcdPrepareDelay <= 0 {
		o.EtcdPrepareDelay = 200 * time.Millisecond
	}
}

// Start serves every machine of opts and returns once all of them listen.
func Start(ctx context.Context, opts Options) (*Fleet, error) {
	if opts.Bundle == nil || opts.Bundle.Certs == nil || opts.Bundle.Certs.OS == nil {
		return nil, errors.New("sim: options need a secrets bundle with an OS CA")
	}

	opts.setDefaults()

	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}

	ca, err := newAuthority(opts.Bundle.Certs.OS.Crt, opts.Bundle.Certs.OS.Key)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}

	meta, err := sharedMeta(ctx)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}

	f := &Fleet{
		log:          log,
		rebootDelay:  opts.RebootDelay,
		upgradeDelay: opts.UpgradeDelay,
		joinDelay:    opts.EtcdJoinDelay,
		schematics:   maps.Clone(opts.Schematics),
		etcdWait:     opts.EtcdClientWait,
		noLeaderWait: opts.EtcdNoLeaderWait,
		criDelay:     opts.CRIStartDelay,
		restartDelay: opts.RestartDelay,
		pullDelay:    opts.InstallerPullDelay,
		cniDelay:     opts.CNIStartDelay,
		joinTimeout:  opts.EtcdJoinTimeout,
		bootTimeout:  opts.BootTimeout,
		etcdPrepare:  opts.EtcdPrepareDelay,
		ca:           ca,
		meta:         meta,
		byName:       map[string]*Machine{},
		byAddr:       map[string]*Machine{},
		byHost:       map[string][]*Machine{},
		agents:       map[string]*agentPod{},
	}
	f.maintenanceTLS = ca.maintenanceTLS()
	f.configuredTLS = ca.configuredTLS()
	f.grpc = grpc.NewServer(
		grpc.Creds(fleetCreds{}),
		// apid and machined accept messages up to 32 MiB, not gRPC's 4 MiB
		// default (talos v1.14.1 internal/app/apid/service.go and
		// system/services/machined.go; v1.11.0 apid/main.go): a big
		// machine config must go through (ApidSuite/TestBigPayload).
		grpc.MaxRecvMsgSize(constants.GRPCMaxMessageSize),
		grpc.ChainUnaryInterceptor(f.unaryInterceptor()),
		grpc.ChainStreamInterceptor(f.streamInterceptor()),
	)
	machine.RegisterMachineServiceServer(f.grpc, &machineAPI{fleet: f})
	machine.RegisterImageServiceServer(f.grpc, &imageAPI{fleet: f})
	machine.RegisterLifecycleServiceServer(f.grpc, &lifecycleAPI{fleet: f})
	timeapi.RegisterTimeServiceServer(f.grpc, &timeAPI{fleet: f})
	cosiv1alpha1.RegisterStateServer(f.grpc, &cosiDispatcher{})

	// machines started with the same config share its parsed form
	loaded := map[[sha256.Size]byte]config.Provider{}

	for _, spec := range opts.Machines {
		m, err := f.add(spec, loaded)
		if err != nil {
			f.Close() //nolint:errcheck // the first error is the one to report

			return nil, fmt.Errorf("sim: machine %q: %w", spec.Name, err)
		}

		f.log.Debug("sim: machine listening", "machine", m.name, "address", m.Addr(), "maintenance", m.persisted == nil)
	}

	f.log.Info("sim: fleet listening", "machines", len(f.machines))

	return f, nil
}

// withDefaults checks a machine's role and fills the role, address, Talos
// version and system disk it leaves empty.
func (spec MachineSpec) withDefaults() (MachineSpec, error) {
	switch spec.Role {
	case "controlplane", "worker":
	case "":
		spec.Role = "worker"
	default:
		return spec, fmt.Errorf("role %q is neither controlplane nor worker", spec.Role)
	}

	if spec.Address == "" {
		spec.Address = "127.0.0.1:0"
	}

	if spec.TalosVersion == "" {
		spec.TalosVersion = "v1.11.0"
	}

	if spec.SystemDisk.Device == "" {
		spec.SystemDisk.Device = "/dev/sda"
	}

	return spec, nil
}

// add validates spec, loads its config (once per distinct config), starts
// listening and serving the machine, and registers it in the fleet.
func (f *Fleet) add(spec MachineSpec, loaded map[[sha256.Size]byte]config.Provider) (*Machine, error) {
	if spec.Name == "" {
		return nil, errors.New("name is empty")
	}

	if _, dup := f.byName[spec.Name]; dup {
		return nil, errors.New("name is not unique")
	}

	spec, err := spec.withDefaults()
	if err != nil {
		return nil, err
	}

	m := &Machine{
		fleet:   f,
		name:    spec.Name,
		role:    spec.Role,
		version: spec.TalosVersion,
		sysDisk: spec.SystemDisk,
		addr:    spec.Address,
		calls:   map[string]int{},
		// a machine the fleet starts with has been up a while: its CRI
		// and etcd admin certificates are there (see Options.CRIStartDelay,
		// etcdNotRunning); a reboot starts the clock again
		booted: time.Now().Add(-time.Minute),
	}

	if spec.Config != nil {
		sum := sha256.Sum256(spec.Config)

		cfg, ok := loaded[sum]
		if !ok {
			var err error

			if cfg, err = configloader.NewFromBytes(spec.Config); err != nil {
				return nil, fmt.Errorf("load config: %w", err)
			}

			loaded[sum] = cfg
		}

		m.active, m.persisted = cfg, cfg
		m.installImage = installImageOf(cfg, m.version)
		m.installed = true
	}

	m.st = newMachineState(f.meta)
	m.cosi = server.NewState(state.WrapCore(state.Filter(m.st, accessPolicy(m.st))))

	// listen first, so the machine's resources can carry its real address
	ln, err := net.Listen("tcp", m.addr)
	if err != nil {
		return nil, fmt.Errorf("listen: %w", err)
	}

	m.addr = ln.Addr().String()
	m.host, _, _ = net.SplitHostPort(m.addr) //nolint:errcheck // a listener's address always splits
	m.ln = &machineListener{Listener: ln, m: m}

	f.mu.Lock()
	f.machines = append(f.machines, m)
	f.byName[m.name] = m
	f.byAddr[m.addr] = m
	f.byHost[m.host] = append(f.byHost[m.host], m)
	f.mu.Unlock()

	m.sync()

	m.mu.Lock()
	m.openLocked()
	m.mu.Unlock()

	if m.active != nil {
		m.armBootTimers(0) // its boot began when the fleet started
	}

	go f.grpc.Serve(m.ln) //nolint:errcheck // Serve returns when the listener closes

	return m, nil
}

// Machines returns every machine, in the order given to Start.
func (f *Fleet) Machines() []*Machine {
	f.mu.Lock()
	defer f.mu.Unlock()

	return append([]*Machine(nil), f.machines...)
}

// Machine returns the named machine, or nil.
func (f *Fleet) Machine(name string) *Machine {
	f.mu.Lock()
	defer f.mu.Unlock()

	return f.byName[name]
}

// Close stops every machine. It is safe to call twice.
func (f *Fleet) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()

		return nil
	}

	f.closed = true
	machines := append([]*Machine(nil), f.machines...)
	f.mu.Unlock()

	var wg sync.WaitGroup

	for _, m := range machines {
		wg.Go(m.close)
	}

	wg.Wait()
	f.grpc.Stop()

	return nil
}

// resolve finds the machine a `node`/`nodes` target names: its address
// (host:port), its name, or its host when only one machine listens there.
// Real apid only takes bare hosts; a loopback fleet needs ports to tell
// machines apart.
func (f *Fleet) resolve(target string) *Machine {
	f.mu.Lock()
	defer f.mu.Unlock()

	if m, ok := f.byAddr[target]; ok {
		return m
	}

	if m, ok := f.byName[target]; ok {
		return m
	}

	if ms := f.byHost[target]; len(ms) == 1 {
		return ms[0]
	}

	return nil
}
