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

	if !s.configured() {
		if !callFrom(ctx).roles.Includes(role.Admin) {
			return nil, status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")
		}
	} else if mc := s.active.Machine(); mc != nil {
		msg.Features = &machine.FeaturesInfo{Rbac: mc.Features().RBACEnabled()}
	}

	return &machine.VersionResponse{Messages: []*machine.Version{msg}}, nil
}

// Bootstrap creates the fleet's etcd cluster on a control plane.
func (a *machineAPI) Bootstrap(ctx context.Context, _ *machine.BootstrapRequest) (*machine.BootstrapResponse, error) {
	t, s := target(ctx)

	if !s.configured() {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap is not available yet")
	}

	if !s.controlPlane() {
		return nil, status.Error(codes.FailedPrecondition, "bootstrap can only be performed on a control plane node")
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

// Mounts lists mounts like /proc/mounts: the filesystem is the mount source.
func (a *machineAPI) Mounts(ctx context.Context, _ *emptypb.Empty) (*machine.MountsResponse, error) {
	_, s := target(ctx)

	stats := []*machine.MountStat{
		{Filesystem: "/dev/loop0", MountedOn: "/", Size: 80 * mib, Available: 0},
		{Filesystem: "tmpfs", MountedOn: "/run", Size: 8 << 30, Available: 8<<30 - 4*mib},
	}

	for _, v := range volumesOf(s) {
		if !v.mounted {
			continue
		}

		stats = append(stats, &machine.MountStat{Filesystem: v.source, MountedOn: v.target, Size: v.size, Available: v.size / 10 * 9})
	}

	return &machine.MountsResponse{Messages: []*machine.Mounts{{Stats: stats}}}, nil
}

// Kubeconfig streams an admin kubeconfig wrapped in .tar.gz, as machined does.
func (a *machineAPI) Kubeconfig(_ *emptypb.Empty, srv grpc.ServerStreamingServer[common.Data]) error {
	_, s := target(srv.Context())

	if err := onlyControlPlane(s, "kubeconfig"); err != nil {
		return err
	}

	kubeconfig, err := adminKubeconfig(s.active.Cluster())
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

// EtcdMemberList lists the fleet's etcd cluster as seen from a member.
func (a *machineAPI) EtcdMemberList(ctx context.Context, _ *machine.EtcdMemberListRequest) (*machine.EtcdMemberListResponse, error) {
	_, s := target(ctx)

	if err := onlyControlPlane(s, "member list"); err != nil {
		return nil, err
	}

	if s.etcdID == 0 {
		return nil, status.Error(codes.Unavailable, "etcd is not running on this node: the cluster has not been bootstrapped or joined yet")
	}

	msg := &machine.EtcdMembers{}

	for _, member := range a.fleet.etcdMembers() {
		ms := member.snap()
		msg.LegacyMembers = append(msg.LegacyMembers, ms.hostname())
		msg.Members = append(msg.Members, &machine.EtcdMember{
			Id:         ms.etcdID,
			Hostname:   ms.hostname(),
			PeerUrls:   []string{fmt.Sprintf("https://%s", joinHostPort(ms.host, 2380))},
			ClientUrls: []string{fmt.Sprintf("https://%s", joinHostPort(ms.host, 2379))},
		})
	}

	return &machine.EtcdMemberListResponse{Messages: []*machine.EtcdMembers{msg}}, nil
}

// EtcdStatus reports the local member's status.
func (a *machineAPI) EtcdStatus(ctx context.Context, _ *emptypb.Empty) (*machine.EtcdStatusResponse, error) {
	_, s := target(ctx)

	if err := onlyControlPlane(s, "etcd status"); err != nil {
		return nil, err
	}

	if s.etcdID == 0 {
		return nil, status.Error(codes.Unavailable, "failed to create etcd client: etcd is not running on this node")
	}

	var leader uint64
	if members := a.fleet.etcdMembers(); len(members) > 0 {
		leader = members[0].etcdMemberID()
	}

	return &machine.EtcdStatusResponse{Messages: []*machine.EtcdStatus{{
		MemberStatus: &machine.EtcdMemberStatus{
			MemberId:         s.etcdID,
			ProtocolVersion:  "3.6.4",
			StorageVersion:   "3.6.0",
			DbSize:           24 * mib,
			DbSizeInUse:      12 * mib,
			Leader:           leader,
			RaftIndex:        4242,
			RaftTerm:         2,
			RaftAppliedIndex: 4242,
		},
	}}}, nil
}

// Reboot takes the node away for the reboot delay after replying.
func (a *machineAPI) Reboot(ctx context.Context, _ *machine.RebootRequest) (*machine.RebootResponse, error) {
	t, _ := target(ctx)

	t.reboot(true)

	return &machine.RebootResponse{Messages: []*machine.Reboot{{ActorId: actorID()}}}, nil
}

func actorID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) //nolint:errcheck // crypto/rand never fails on Linux

	h := hex.EncodeToString(b)

	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
