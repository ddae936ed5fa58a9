package talosapi

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	cosiv1alpha1 "github.com/cosi-project/runtime/api/v1alpha1"
	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	configpb "github.com/siderolabs/talos/pkg/machinery/api/resource/config"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/resources/v1alpha1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"devata.dev/devata/inventory"
)

// Observation is what one pass read from one machine. Each fact carries its own
// error, so that a permission problem on one resource makes only the checks
// that need it Unknown.
type Observation struct {
	Machine  *inventory.Machine
	Endpoint string
	// Err is set when the machine could not be reached at all; every fact is then empty.
	Err error
	// Maintenance is set when the machine answers only insecurely, unconfigured.
	Maintenance bool

	// Version is the Talos version the machine runs: on a machine in
	// maintenance mode, the release it booted (detectMaintenance), with
	// VersionErr saying why it is "" when it could not be read.
	Version    string
	VersionErr error

	// Active is the applied machine config (MachineConfig v1alpha1) as Talos stores it.
	// Holders drop it once compared; ActiveHash stays.
	Active     []byte
	ActiveHash [32]byte
	// PersistentHash is the config staged for the next boot; differing from ActiveHash means staged, not applied.
	PersistentHash [32]byte
	HasPersistent  bool
	ConfigErr      error

	Stage     string
	Ready     bool
	Unmet     []string
	StatusErr error

	Kubelet    ServiceState
	KubeletErr error

	// EtcdService is the etcd service as machined lists it, read on control
	// planes only; EtcdServiceErr when ServiceList failed.
	EtcdService    *EtcdService
	EtcdServiceErr error
	// Etcd is read on control planes only, and only while the etcd service
	// runs: without a running etcd Talos' etcd client waits until the
	// caller's deadline instead of answering.
	Etcd    *EtcdState
	EtcdErr error
	// EtcdLocal is the member's own status (EtcdStatus), whenever it
	// answered: it needs no leader, so it is there when the member list
	// is not (EtcdErr wraps ErrEtcdNoLeader).
	EtcdLocal *EtcdMemberStatus

	// Boot is read only when asked (ReadBootImage); BootErr when that
	// read failed.
	Boot    *BootImage
	BootErr error
}

// EtcdService is the etcd service's state and its latest event.
type EtcdService struct {
	State string // "Preparing", "Running", "Failed", …
	// Event is the latest event's message; Since its time on the node's clock.
	Event                  string
	Since                  time.Time
	Healthy, HealthUnknown bool
}

// etcdPreparing is the service runner's message while the etcd service's
// PreFunc runs (internal/app/machined/pkg/system/service_runner.go), which on
// a control plane without etcd data waits there to join a cluster
// (services/etcd.go buildInitialCluster) until it is bootstrapped or joins.
const etcdPreparing = "Running pre state"

// WaitingForEtcd reports the positive evidence that the control plane's
// etcd has not started on this boot: its service is Preparing in its
// PreFunc. On a node without etcd data it stays there until it is
// bootstrapped or joins; a node with data passes through it briefly after
// each boot, so callers that act on it (bootstrap) wait to see it hold.
func (o *Observation) WaitingForEtcd() bool {
	return o.EtcdService != nil && o.EtcdService.State == "Preparing" && o.EtcdService.Event == etcdPreparing
}

// ErrEtcdNotRunning is wrapped by EtcdErr when the etcd service does not run,
// so etcd was not asked.
var ErrEtcdNotRunning = errors.New("etcd is not running")

// ErrEtcdNoLeader is wrapped by EtcdErr when the control plane's etcd runs
// but has no leader, so its members cannot be read: etcd has lost quorum
// (more than half of its members are down), or is electing a leader. Talos'
// EtcdMemberList requires a leader (v1alpha1_server.go:
// clientv3.WithRequireLeader) and fails "etcdserver: no leader", code
// Unknown; EtcdStatus still answers, with leader 0 and that error in
// Errors (etcd's v3rpc maintenance.go Status), and EtcdSnapshot still
// streams the member's local copy.
var ErrEtcdNoLeader = errors.New("etcd has no leader, so no quorum")

// ErrEtcdLearner is wrapped by EtcdErr when the control plane's etcd runs
// as a learner, added to a cluster and not yet promoted (Talos promotes it
// once it has caught up: services/etcd.go promoteMember). etcd serves a
// learner Status but refuses it MemberList (v3rpc interceptor.go
// isRPCSupportedForLearner: "etcdserver: rpc not supported for learner"),
// which Talos passes on, code Unknown. It holds data: it has joined.
var ErrEtcdLearner = errors.New("etcd runs as a learner, not yet promoted")

// etcdLearner is etcd's own text for it (rpctypes.ErrGRPCNotSupportedForLearner).
const etcdLearner = "etcdserver: rpc not supported for learner"

// etcdNoLeader is etcd's own text for it (etcdserver errors.ErrNoLeader,
// rpctypes.ErrGRPCNoLeader): what Talos passes on, code Unknown.
const etcdNoLeader = "etcdserver: no leader"

// NotReadyOnlyForNode reports a machine whose MachineStatus is not ready for
// one reason only: its Kubernetes Node is not Ready or not registered
// (machine_status.go nodeReadyCheck). The kubelet check reports the Node;
// with cluster.network.cni none no Node is Ready before the CNI runs.
func (o *Observation) NotReadyOnlyForNode() bool {
	if o.Ready || len(o.Unmet) == 0 {
		return false
	}
	for _, u := range o.Unmet {
		if !strings.HasPrefix(u, unmetNodeReady+": ") {
			return false
		}
	}
	return true
}

const unmetNodeReady = "nodeReady"

// PendingConfig reports a machine whose active config is not the one it
// would boot: a `--mode try` waiting for its rollback, or a config staged for
// the next reboot. Any ApplyConfiguration that is not TRY, dry runs
// included, cancels a pending try's rollback
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// ApplyConfiguration), so such a machine is left alone.
func (o *Observation) PendingConfig() bool {
	return o.HasPersistent && o.PersistentHash != o.ActiveHash
}

// ServiceState is a Talos service's state.
type ServiceState struct {
	Running, Healthy, Unknown bool
}

// EtcdState is one control plane's view of etcd.
type EtcdState struct {
	Members  []string // member hostnames
	Learners []string
	// IDs are the members' and learners' IDs by hostname (talosctl etcd
	// remove-member takes them).
	IDs      map[string]uint64
	MemberID uint64
	Leader   uint64
	Errors   []string
}

// EtcdMemberStatus is one member's own status as EtcdStatus reports it.
type EtcdMemberStatus struct {
	MemberID, Leader uint64
	Errors           []string
	// Learner: the member is a learner, not yet promoted.
	Learner bool
}

// NoLeader reports a member that runs without a leader (etcd's own
// "etcdserver: no leader" in its status).
func (s *EtcdMemberStatus) NoLeader() bool {
	return s != nil && s.Leader == 0 && slices.Contains(s.Errors, etcdNoLeader)
}

// Observe reads everything the machine checks need from one machine, with the
// calls in flight together on one connection: the cost is one round trip plus
// the slowest read. It never returns an error: failures are in the Observation.
// reads adds facts not every pass needs.
func Observe(ctx context.Context, d *Dialer, m *inventory.Machine, reads ...Read) *Observation {
	c, err := d.Client(ctx, m)
	if err != nil {
		return &Observation{Machine: m, Endpoint: d.Endpoint(m), Err: fmt.Errorf("dial %s: %w", d.Endpoint(m), err)}
	}
	defer c.Close()
	return ObserveWith(ctx, c, d, m, reads...)
}

// ObserveWith is Observe over a client the caller holds, so that other
// checks (storage) can read on the same connection.
func ObserveWith(ctx context.Context, c *client.Client, d *Dialer, m *inventory.Machine, reads ...Read) *Observation {
	o := &Observation{Machine: m, Endpoint: d.Endpoint(m)}

	// Version first: it tells reachable from not, and maintenance from configured.
	resp, err := c.Version(ctx)
	if err != nil {
		o.notAnswered(ctx, d, err)
		return o
	}
	if len(resp.GetMessages()) > 0 {
		o.Version = resp.GetMessages()[0].GetVersion().GetTag()
	}

	var wg sync.WaitGroup
	read := func(fn func()) {
		wg.Add(1)
		go func() { defer wg.Done(); fn() }()
	}
	read(func() {
		active, err := readMachineConfig(ctx, c, config.ActiveID)
		if err != nil {
			o.ConfigErr = fmt.Errorf("read MachineConfig %s: %w", config.ActiveID, PlainError(err))
			return
		}
		o.Active, o.ActiveHash = active, sha256.Sum256(active)
	})
	read(func() {
		p, err := readMachineConfig(ctx, c, config.PersistentID)
		if err != nil {
			return // no persistent config is normal before the first reboot; the active one decides
		}
		o.PersistentHash, o.HasPersistent = sha256.Sum256(p), true
	})
	read(func() {
		ms, err := safe.StateGet[*runtime.MachineStatus](ctx, c.COSI, resource.NewMetadata(runtime.NamespaceName, runtime.MachineStatusType, runtime.MachineStatusID, resource.VersionUndefined))
		if err != nil {
			o.StatusErr = fmt.Errorf("read MachineStatus: %w", PlainError(err))
			return
		}
		spec := ms.TypedSpec()
		o.Stage, o.Ready = spec.Stage.String(), spec.Status.Ready
		for _, u := range spec.Status.UnmetConditions {
			o.Unmet = append(o.Unmet, u.Name+": "+u.Reason)
		}
	})
	read(func() {
		svc, err := safe.StateGet[*v1alpha1.Service](ctx, c.COSI, resource.NewMetadata(v1alpha1.NamespaceName, v1alpha1.ServiceType, "kubelet", resource.VersionUndefined))
		if err != nil {
			o.KubeletErr = fmt.Errorf("read Service kubelet: %w", PlainError(err))
			return
		}
		s := svc.TypedSpec()
		o.Kubelet = ServiceState{Running: s.Running, Healthy: s.Healthy, Unknown: s.Unknown}
	})
	if slices.Contains(reads, ReadBootImage) {
		read(func() { o.Boot, o.BootErr = ObserveBootImage(ctx, c) })
	}
	if m.IsControlPlane() {
		read(func() {
			o.EtcdService, o.EtcdServiceErr = observeEtcdService(ctx, c)
			switch {
			case o.EtcdServiceErr != nil:
				o.EtcdErr = o.EtcdServiceErr
			case o.EtcdService.State != "Running":
				o.EtcdErr = fmt.Errorf("%w: service etcd %s (%s)", ErrEtcdNotRunning, o.EtcdService.State, o.EtcdService.Event)
			default:
				o.Etcd, o.EtcdLocal, o.EtcdErr = observeEtcd(ctx, c)
			}
		})
	}
	wg.Wait()
	return o
}

// notAnswered sets Err for a machine whose first call failed with err: a
// machine in maintenance mode (asked again insecurely when err says
// nothing answered), a worker as the endpoint, or err itself.
func (o *Observation) notAnswered(ctx context.Context, d *Dialer, err error) {
	o.Err = fmt.Errorf("talos api %s: %w", o.Endpoint, PlainError(err))
	if IsNoForwarding(err) {
		o.Err = fmt.Errorf("talos api %s: %w: the endpoint the call went through is a worker, whose Talos API answers only for itself; give control planes as endpoints (-e, or the talosconfig context's)", o.Endpoint, PlainError(err))
	}
	if !IsUnreachable(err) {
		return
	}
	if ok, version, verr := detectMaintenance(ctx, d, o.Machine); ok {
		o.Err = fmt.Errorf("talos api %s: the machine is in maintenance mode (not configured yet)", o.Endpoint)
		o.Maintenance = true
		o.Version, o.VersionErr = version, verr
	}
}

// ObserveEtcd reads a control plane's etcd with no more than the
// os:etcd:backup role may call (services/machined.go rules): EtcdMemberList
// and EtcdStatus, into Etcd, EtcdLocal and EtcdErr. When the talosconfig's
// role may read more (os:reader and up, or a role the dialer cannot tell),
// the etcd service is read first (ServiceList), which tells a control plane
// whose etcd does not run at once, where Talos' etcd client would wait for
// the caller's deadline; it is never needed, and a refusal is no answer.
// Err is set when the machine did not answer at all (or only in
// maintenance mode). Nothing else is read: no Version, no resources.
func ObserveEtcd(ctx context.Context, d *Dialer, m *inventory.Machine) *Observation {
	o := &Observation{Machine: m, Endpoint: d.Endpoint(m)}
	c, err := d.Client(ctx, m)
	if err != nil {
		o.Err = fmt.Errorf("dial %s: %w", d.Endpoint(m), err)
		return o
	}
	defer c.Close()
	if d.mayRead() {
		svc, err := observeEtcdService(ctx, c)
		switch {
		case err == nil && svc.State != "Running":
			o.EtcdService = svc
			o.EtcdErr = fmt.Errorf("%w: service etcd %s (%s)", ErrEtcdNotRunning, svc.State, svc.Event)
			return o
		case err == nil:
			o.EtcdService = svc
		case client.StatusCode(err) == codes.PermissionDenied && !IsNoForwarding(err):
			// the role may not read services after all: etcd alone tells
		case IsUnreachable(err) || IsNoForwarding(err):
			o.notAnswered(ctx, d, errors.Unwrap(err)) // without observeEtcdService's "service etcd: "
			return o
		default:
			o.EtcdServiceErr = err
		}
	}
	o.Etcd, o.EtcdLocal, o.EtcdErr = observeEtcd(ctx, c)
	if o.Etcd == nil && o.EtcdLocal == nil && o.EtcdService == nil &&
		(client.StatusCode(o.EtcdErr) == codes.Unavailable || IsNoForwarding(o.EtcdErr)) {
		// neither etcd call reached the machine: it is down, not its etcd
		o.notAnswered(ctx, d, errors.Unwrap(o.EtcdErr))
		o.EtcdErr = nil
	}
	return o
}

// readMachineConfig returns a MachineConfig resource's bytes as Talos stores
// them. It reads the raw COSI resource and takes the spec's YAML bytes: the
// typed client would parse the whole config into a machinery provider (a
// third of a drift pass's CPU) only for devata to ask for those bytes back.
func readMachineConfig(ctx context.Context, c *client.Client, id resource.ID) ([]byte, error) {
	resp, err := cosiv1alpha1.NewStateClient(c.Conn()).Get(ctx, &cosiv1alpha1.GetRequest{
		Namespace: config.NamespaceName, Type: config.MachineConfigType, Id: id,
	})
	if err != nil {
		return nil, err
	}
	var spec configpb.MachineConfigSpec
	if err := proto.Unmarshal(resp.GetResource().GetSpec().GetProtoSpec(), &spec); err != nil {
		return nil, fmt.Errorf("decode MachineConfig %s: %w", id, err)
	}
	return spec.GetYamlMarshalled(), nil
}

// observeEtcdService reads the etcd service from machined's ServiceList
// (os:reader may): its state and latest event. machined keeps a Service
// resource only while a service runs (controllers/v1alpha1/service.go), so
// the resource cannot show Preparing.
func observeEtcdService(ctx context.Context, c *client.Client) (*EtcdService, error) {
	resp, err := c.ServiceInfo(ctx, "etcd")
	if err != nil {
		return nil, fmt.Errorf("service etcd: %w", PlainError(err))
	}
	if len(resp) == 0 || resp[0].Service == nil {
		return nil, errors.New("service etcd: not listed by the node")
	}
	svc := resp[0].Service
	st := &EtcdService{State: svc.GetState(), Healthy: svc.GetHealth().GetHealthy(), HealthUnknown: svc.GetHealth().GetUnknown()}
	if evs := svc.GetEvents().GetEvents(); len(evs) > 0 {
		last := evs[len(evs)-1]
		st.Event, st.Since = last.GetMsg(), last.GetTs().AsTime()
	}
	return st, nil
}

// observeEtcd asks the member for the member list and its own status side
// by side. Without a leader the list fails (ErrEtcdNoLeader) and only the
// status, local, is there.
func observeEtcd(ctx context.Context, c *client.Client) (*EtcdState, *EtcdMemberStatus, error) {
	var (
		wg                sync.WaitGroup
		members           *machine.EtcdMemberListResponse
		status            *machine.EtcdStatusResponse
		membersErr, stErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		members, membersErr = c.EtcdMemberList(ctx, &machine.EtcdMemberListRequest{QueryLocal: true})
	}()
	go func() { defer wg.Done(); status, stErr = c.EtcdStatus(ctx) }()
	wg.Wait()
	var local *EtcdMemberStatus
	if stErr == nil {
		for _, msg := range status.GetMessages() {
			ms := msg.GetMemberStatus()
			local = &EtcdMemberStatus{MemberID: ms.GetMemberId(), Leader: ms.GetLeader(), Errors: ms.GetErrors(), Learner: ms.GetIsLearner()}
		}
	}
	if membersErr != nil {
		if strings.Contains(membersErr.Error(), etcdLearner) || (local != nil && local.Learner) {
			return nil, local, fmt.Errorf("%w: etcd member list: %w", ErrEtcdLearner, PlainError(membersErr))
		}
		if strings.Contains(membersErr.Error(), etcdNoLeader) || local.NoLeader() {
			return nil, local, fmt.Errorf("%w: etcd member list: %w", ErrEtcdNoLeader, PlainError(membersErr))
		}
		return nil, local, fmt.Errorf("etcd member list: %w", PlainError(membersErr))
	}
	st := &EtcdState{IDs: map[string]uint64{}}
	for _, msg := range members.GetMessages() {
		for _, mem := range msg.GetMembers() {
			st.IDs[mem.GetHostname()] = mem.GetId()
			if mem.GetIsLearner() {
				st.Learners = append(st.Learners, mem.GetHostname())
			} else {
				st.Members = append(st.Members, mem.GetHostname())
			}
		}
	}
	switch {
	case stErr != nil:
		return st, nil, fmt.Errorf("etcd status: %w", PlainError(stErr))
	case local == nil:
		return st, nil, errors.New("etcd status: the node sent no status")
	}
	st.MemberID, st.Leader = local.MemberID, local.Leader
	st.Errors = append(st.Errors, local.Errors...)
	return st, local, nil
}

// detectMaintenance asks insecurely, as talosctl --insecure would: a machine in
// maintenance mode serves a certificate of its own and answers there. It
// also learns the Talos the machine booted, which is what parses the
// config it is sent: from 1.13 Version answers every caller there
// (apid runs with ReadonlyRoleMode, every caller os:reader, and machined's
// rules let os:reader call Version: v1.13.9
// controllers/runtime/api_service_config.go, services/machined.go); up to
// 1.12 the maintenance server's Version answers Unimplemented "API is not
// implemented in maintenance mode" to all but os:admin (v1.12.0
// internal/app/maintenance/server.go assertAdminRole), so the Version
// resource is read instead, which VersionController writes with the running
// tag on every release (controllers/runtime/version.go) and the resource
// access policy lets os:reader read (internal/app/resources/access.go).
// verErr says why the version could not be learned.
func detectMaintenance(ctx context.Context, d *Dialer, m *inventory.Machine) (ok bool, version string, verErr error) {
	c, err := d.MaintenanceClient(ctx, m)
	if err != nil {
		return false, "", nil
	}
	defer c.Close()
	resp, err := c.Version(ctx)
	if err == nil {
		if msgs := resp.GetMessages(); len(msgs) > 0 && msgs[0].GetVersion().GetTag() != "" {
			return true, msgs[0].GetVersion().GetTag(), nil
		}
		return true, "", errors.New("the Version reply holds no tag")
	}
	switch client.StatusCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return false, "", nil
	}
	v, rerr := safe.StateGet[*runtime.Version](ctx, c.COSI, resource.NewMetadata(runtime.NamespaceName, runtime.VersionType, versionID, resource.VersionUndefined))
	switch {
	case rerr != nil:
		return true, "", fmt.Errorf("Version: %w; the Version resource: %w", PlainError(err), PlainError(rerr))
	case v.TypedSpec().Version == "":
		return true, "", errors.New("the Version resource holds no version")
	}
	return true, v.TypedSpec().Version, nil
}

// versionID is the Version resource's ID (machinery resources/runtime
// NewVersion).
const versionID = "version"

// IsNoForwarding reports apid's refusal to route a call to another node:
// a worker's apid has no client certificate to forward with (Talos v1.11
// secrets/api.go generateWorker) and refuses any call whose target is not
// itself with PermissionDenied "no request forwarding" (apid director.go
// singleDirector, aggregateDirector).
func IsNoForwarding(err error) bool {
	return client.StatusCode(err) == codes.PermissionDenied && strings.Contains(err.Error(), "no request forwarding")
}

// IsUnreachable reports whether err means the machine did not answer at all.
func IsUnreachable(err error) bool {
	switch client.StatusCode(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return errors.Is(err, context.DeadlineExceeded)
}

// PlainError shortens gRPC's "rpc error: code = X desc = Y" to "Y (X)" for
// people, keeping the original underneath for client.StatusCode and errors.Is.
func PlainError(err error) error {
	msg := err.Error()
	if i := strings.Index(msg, "desc = "); strings.HasPrefix(msg, "rpc error: code = ") && i > 0 {
		code := strings.TrimSpace(strings.TrimPrefix(msg[:i], "rpc error: code = "))
		desc := msg[i+len("desc = "):]
		// gRPC wraps dial failures as `connection error: desc = "transport: …: read
		// tcp a->b: read: connection reset by peer"`: the last part is the news.
		if inner, ok := strings.CutPrefix(desc, `connection error: desc = "`); ok {
			inner = strings.TrimSuffix(inner, `"`)
			if j := strings.LastIndex(inner, ": "); j >= 0 {
				inner = inner[j+2:]
			}
			desc = "not reachable: " + inner
		}
		return &apiError{msg: fmt.Sprintf("%s (%s)", desc, code), err: err}
	}
	return err
}

type apiError struct {
	msg string
	err error
}

func (e *apiError) Error() string { return e.msg }
func (e *apiError) Unwrap() error { return e.err }

// GRPCStatus lets status.FromError and client.StatusCode see the original code.
func (e *apiError) GRPCStatus() *status.Status { s, _ := status.FromError(e.err); return s }
