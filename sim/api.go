package sim

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/siderolabs/talos/pkg/machinery/version"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// machineAPI is the MachineService of every machine of a fleet: each call
// serves the machine it was routed to (see call).
type machineAPI struct {
	machine.UnimplementedMachineServiceServer

	fleet *Fleet
}

func target(ctx context.Context) (*Machine, snapshot) {
	t := callFrom(ctx).target

	return t, t.snap()
}

func onlyControlPlane(s snapshot, api string) error {
	if !s.controlPlane() {
		return status.Errorf(codes.Unimplemented, "%s is only available on control plane nodes", api)
	}

	return nil
}

// Version reports the machine's Talos version. In maintenance mode only
// os:admin (a SideroLink peer in Talos) may ask; everyone else is reader.
func (a *machineAPI) Version(ctx context.Context, _ *emptypb.Empty) (*machine.VersionResponse, error) {
	_, s := target(ctx)

	msg := &machine.Version{
		Version:  version.NewVersion(),
		Platform: &machine.PlatformInfo{Name: "metal", Mode: "metal"},
	}
	msg.Version.Tag = s.version
	// the Go that built that release, not the sim's own (goversion.go)
	msg.Version.GoVersion = goVersionOf(s.version)

	if !s.configured() {
		// up to 1.12 the maintenance server's Version answers os:admin
		// only (v1.12.0 maintenance/server.go assertAdminRole); from 1.13
		// machined's answers every caller, without features while no
		// config is loaded (v1.13.9 v1alpha1_server.go Version)
		if !lifecycleAPIs(s.version) && !callFrom(ctx).roles.Includes(role.Admin) {
			return nil, status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")
		}
	} else if mc := s.active.Machine(); mc != nil {
		// Talos v1.14.1 v1alpha1_server.go Version: Rbac is true whenever a
		// config with a machine section is loaded (machine.features.rbac
		// is hidden from 1.12 configs on, HideRBACAndKeyUsage)
		msg.Features = &machine.FeaturesInfo{Rbac: true}
	}

	return &machine.VersionResponse{Messages: []*machine.Version{msg}}, nil
}

// simMemTotalKiB is every simulated machine's memory: 16 GiB, above
// pkg/minimal Memory's minimum for each role that talosctl health checks.
const simMemTotalKiB = 16 << 20

// Memory answers /proc/meminfo's figures, as machined's Memory does
// (v1alpha1_server.go, Memory): a machine with 16 GiB, a quarter in use.
func (a *machineAPI) Memory(ctx context.Context, _ *emptypb.Empty) (*machine.MemoryResponse, error) {
	_, s := target(ctx)
	if !s.configured() {
		return nil, status.Error(codes.Unimplemented, "method Memory not implemented")
	}

	return &machine.MemoryResponse{Messages: []*machine.Memory{{
		Meminfo: &machine.MemInfo{
			Memtotal:     simMemTotalKiB,
			Memfree:      simMemTotalKiB / 2,
			Memavailable: simMemTotalKiB * 3 / 4,
			Cached:       simMemTotalKiB / 4,
		},
	}}}, nil
}

// Bootstrap starts a new etcd cluster on a control plane whose etcd data
// directory is empty (v1alpha1_server.go Bootstrap; services/etcd.go with
// Bootstrap: true makes a single-member cluster). The guard is this node's
// data only: on a control plane that has not joined yet it makes a second
// cluster, as on Talos. In maintenance mode Bootstrap is not served at all
// (the maintenance service implements no Bootstrap: route.go).
func (a *machineAPI) Bootstrap(ctx context.Context, in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	t, _ := target(ctx)

	if _, err := t.bootstrap(in); err != nil {
		return nil, err
	}

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// Bootstrap bootstraps etcd on the machine as the Bootstrap API call does,
// with the same refusals (gRPC status errors): for a fleet that should start
// as a built cluster, the way an operator's `talosctl bootstrap` would.
func (m *Machine) Bootstrap() error {
	_, err := m.bootstrap(&machine.BootstrapRequest{})

	return err
}

func (m *Machine) bootstrap(in *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	t, s := m, m.snap()
	a := machineAPI{fleet: m.fleet}

	if !s.configured() {
		return nil, status.Error(codes.Unimplemented, "method Bootstrap not implemented")
	}

	// v1alpha1_runtime.go IsBootstrapAllowed: CRI must be up, and it comes
	// up shortly after boot (Options.CRIStartDelay)
	if time.Since(s.booted) < m.fleet.criDelay {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}

	if !s.controlPlane() {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
	}

	if t.etcdDataDirFull() {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	if in.GetRecoverEtcd() {
		// the etcd service restores the uploaded snapshot as it starts:
		// the call has replied by then, and a failure shows in the
		// service (services/etcd.go recoverFromSnapshot)
		t.replaceEtcdService()
		go t.recoverEtcd(in.GetRecoverSkipHashCheck())

		return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
	}

	if !a.fleet.bootstrapEtcd(t) {
		return nil, status.Error(codes.AlreadyExists, "etcd data directory is not empty")
	}

	a.fleet.log.Info("sim: etcd bootstrapped", "machine", t.name)

	return &machine.BootstrapResponse{Messages: []*machine.Bootstrap{{}}}, nil
}

// ServiceList reports the node's services with their events.
func (a *machineAPI) ServiceList(ctx context.Context, _ *emptypb.Empty) (*machine.ServiceListResponse, error) {
	_, s := target(ctx)

	var infos []*machine.ServiceInfo

	for _, svc := range servicesOf(s) {
		info := &machine.ServiceInfo{
			Id:     svc.id,
			State:  svc.state,
			Events: &machine.ServiceEvents{},
			Health: &machine.ServiceHealth{
				Unknown:     svc.unknown,
				Healthy:     svc.healthy && !svc.unknown,
				LastMessage: svc.message,
			},
		}

		for _, ev := range svc.events {
			info.Events.Events = append(info.Events.Events, &machine.ServiceEvent{Msg: ev.msg, State: ev.state, Ts: timestamppb.New(ev.ts)})
			info.Health.LastChange = timestamppb.New(ev.ts)
		}

		infos = append(infos, info)
	}

	return &machine.ServiceListResponse{Messages: []*machine.ServiceList{{Services: infos}}}, nil
}

// Mounts lists mounts like /proc/mounts: the filesystem is the mount source,
// sizes are the filesystems' (see mountStats).
func (a *machineAPI) Mounts(ctx context.Context, _ *emptypb.Empty) (*machine.MountsResponse, error) {
	_, s := target(ctx)

	stats, err := mountStats(s, nil)
	if err != nil {
		return nil, err
	}

	return &machine.MountsResponse{Messages: []*machine.Mounts{{Stats: stats}}}, nil
}

// Kubeconfig streams an admin kubeconfig wrapped in .tar.gz, as machined does.
func (a *machineAPI) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	_, s := target(srv.Context())

	if err := onlyControlPlane(s, "kubeconfig"); err != nil {
		return err
	}

	kubeconfig, err := adminKubeconfig(s.active)
	if err != nil {
		return status.Errorf(codes.Internal, "generate kubeconfig: %v", err)
	}

	var buf bytes.Buffer

	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)

	if err = tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "kubeconfig", Size: int64(len(kubeconfig)), ModTime: time.Now(), Mode: 0o600}); err != nil {
		return err
	}

	if _, err = tw.Write(kubeconfig); err != nil {
		return err
	}

	if err = tw.Close(); err != nil {
		return err
	}

	if err = zw.Close(); err != nil {
		return err
	}

	return srv.Send(&common.Data{Bytes: buf.Bytes()})
}

// EtcdMemberList lists the node's etcd cluster as its local etcd sees it
// (v1alpha1_server.go EtcdMemberList): learners included, a member whose
// etcd has not started yet without a name. Without a running etcd it
// answers as Talos' etcd client does (etcdNotRunning); on a member whose
// cluster has no quorum it fails "etcdserver: no leader", code Unknown,
// as Talos' call WithRequireLeader does (memberListNoLeader), on
// QueryLocal or not: no member that runs has a leader to answer.
func (a *machineAPI) EtcdMemberList(ctx context.Context, _ *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	t, s := target(ctx)

	if err := onlyControlPlane(s, "member list"); err != nil {
		return nil, err
	}

	if id, _ := a.fleet.learnerOf(t); id != 0 {
		// the local etcd runs as a learner: etcd refuses it MemberList
		// (isRPCSupportedForLearner); the client's error, code Unknown
		return nil, status.Error(codes.Unknown, errLearner)
	}

	members, leader := a.fleet.etcdMembersOf(t)
	if members == nil {
		return nil, a.fleet.etcdNotRunning(ctx, s)
	}

	if leader == 0 {
		return nil, a.fleet.memberListNoLeader(ctx)
	}

	msg := &machine.EtcdMembers{}

	for _, mem := range members {
		msg.LegacyMembers = append(msg.LegacyMembers, mem.name)
		msg.Members = append(msg.Members, &machine.EtcdMember{
			Id:         mem.id,
			Hostname:   mem.name,
			PeerUrls:   []string{fmt.Sprintf("https://%s", joinHostPort(mem.host, 2380))},
			ClientUrls: clientURLs(mem),
			IsLearner:  mem.learner,
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{msg}}, nil
}

// clientURLs: a member advertises client URLs once its etcd started.
func clientURLs(mem memberView) []string {
	if mem.name == "" {
		return nil
	}

	return []string{fmt.Sprintf("https://%s", joinHostPort(mem.host, 2379))}
}

// EtcdStatus reports the local member's status, as Talos' EtcdStatus
// passes on etcd's Maintenance.Status (v1alpha1_server.go EtcdStatus;
// etcd server/etcdserver/api/v3rpc/maintenance.go Status): it needs no
// leader, so a member without quorum answers too, with Leader 0 and
// "etcdserver: no leader" in Errors. Its versions are the etcd the
// machine's Talos runs and its cluster's storage version (etcdversion.go).
func (a *machineAPI) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	t, s := target(ctx)

	if err := onlyControlPlane(s, "etcd status"); err != nil {
		return nil, err
	}

	if id, leader := a.fleet.learnerOf(t); id != 0 {
		// a learner serves Status (isRPCSupportedForLearner), with the
		// versions a voter reports
		server, storage := a.fleet.etcdVersionsOf(t)

		return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: &machine.EtcdMemberStatus{
			MemberId: id, ProtocolVersion: server, StorageVersion: storage, DbSize: 24 * mib, DbSizeInUse: 12 * mib,
			Leader: leader, RaftIndex: etcdRaftIndex, RaftTerm: etcdRaftTerm, RaftAppliedIndex: etcdRaftIndex, IsLearner: true,
		}}}}, nil
	}

	members, leader := a.fleet.etcdMembersOf(t)
	if members == nil {
		return nil, a.fleet.etcdNotRunning(ctx, s)
	}

	server, storage := a.fleet.etcdVersionsOf(t)
	st := &machine.EtcdMemberStatus{
		MemberId:         s.etcdID,
		ProtocolVersion:  server,
		StorageVersion:   storage,
		DbSize:           24 * mib,
		DbSizeInUse:      12 * mib,
		Leader:           leader,
		RaftIndex:        etcdRaftIndex,
		RaftTerm:         etcdRaftTerm,
		RaftAppliedIndex: etcdRaftIndex,
	}

	for _, mem := range members {
		if mem.id == s.etcdID {
			st.IsLearner = mem.learner
		}
	}

	if leader == 0 {
		st.Errors = append(st.Errors, errNoLeader.Error())
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{MemberStatus: st}}}, nil
}

// Reboot takes the node away for the reboot delay after replying. While
// an upgrade sequence runs, the reboot sequence cannot take over
// (sequencer.go CanTakeOver): machined logs it, and acks all the same.
func (a *machineAPI) Reboot(ctx context.Context, _ *machine.RebootRequest) (*machine.RebootResponse, error) {
	t, s := target(ctx)

	if s.upgrading {
		a.fleet.log.Info("sim: reboot not started: an upgrade runs", "machine", t.name)
	} else {
		t.reboot(true)
	}

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actorID()}}}, nil
}

// actorID is a random (version 4) UUID, as machined's uuid.New().String()
// makes for every action.
func actorID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) //nolint:errcheck // crypto/rand never fails on Linux

	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 4122 variant

	h := hex.EncodeToString(b)

	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// EtcdAlarmList lists the local member's etcd alarms, as Talos passes on
// etcd's AlarmList (v1.11.0, v1.13.9 and v1.14.1 v1alpha1_server.go
// EtcdAlarmList, mapAlarms): Unimplemented "etcd alarm list is only
// available on control plane nodes" on a worker (CheckControlplane), and
// on a control plane whose etcd does not run NewLocalClient's failure
// "failed to create etcd client: …" or the wait "failed to list etcd
// alarms: …". The sim's etcd raises no alarm (its database never fills:
// NOSPACE, nor is found corrupt: CORRUPT), so a member answers one message
// with none, as etcd does with no alarm raised.
func (a *machineAPI) EtcdAlarmList(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdAlarmListResponse, error) {
	t, s := target(ctx)

	if err := onlyControlPlane(s, "etcd alarm list"); err != nil {
		return nil, err
	}

	if members, _ := a.fleet.etcdMembersOf(t); members == nil {
		st := status.Convert(a.fleet.etcdNotRunning(ctx, s))
		if st.Code() == codes.Unknown {
			return nil, status.Error(codes.Unknown, "failed to create etcd client: "+st.Message())
		}

		return nil, status.Error(st.Code(), "failed to list etcd alarms: "+st.Message())
	}

	return &machine.EtcdAlarmListResponse{Messages: []*machine.EtcdAlarm{{}}}, nil
}
