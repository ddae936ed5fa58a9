package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcd's refusals of a member removal, as clientv3 hands them to Talos
// (etcdserver/api/v3rpc/rpctypes): EtcdError values that carry no gRPC
// status, so Talos' fmt.Errorf wrapping reaches the caller with code
// Unknown; only EtcdRemoveMemberByID maps ErrMemberNotFound (NotFound).
var (
	errMemberNotFound   = errors.New("etcdserver: member not found")
	errNotEnoughStarted = errors.New("etcdserver: re-configuration failed due to not enough started members")
	errUnhealthy        = errors.New("etcdserver: unhealthy cluster")
	errNoLeader         = errors.New("etcdserver: no leader")
)

// leaveRetry is the unit of Talos' retry of an unhealthy removal
// (etcd.go LeaveCluster: retry.Constant(5*time.Minute,
// retry.WithUnits(10*time.Second))).
const (
	leaveRetry    = 10 * time.Second
	leaveRetryFor = 5 * time.Minute
	// localMemberWait is how long GetLocalMemberID waits for the node's
	// etcd Member resource (internal/pkg/etcd/local.go).
	localMemberWait = 3 * time.Minute
)

// clusterReachedFrom is the cluster Talos' etcd client reaches from m:
// NewClientFromControlPlaneIPs dials the control planes' addresses, so
// it is m's own cluster when m has one, else the oldest (the one the
// control planes' endpoints lead to); nil when no etcd runs.
func (f *Fleet) clusterReachedFrom(m *Machine) *etcdCluster {
	f.mu.Lock()
	defer f.mu.Unlock()

	m.mu.Lock()
	c := m.etcdCluster
	m.mu.Unlock()

	if c == nil && len(f.etcd) > 0 {
		c = f.etcd[0]
	}

	return c
}

// removeMember is etcd's MemberRemove under its strict reconfiguration
// check (server.go mayRemoveMember; --strict-reconfig-check is on by
// default), behind clientv3.WithRequireLeader as Talos calls it:
//
//   - no leader (fewer than a quorum of voting members healthy): ErrNoLeader;
//   - an unknown ID: ErrMemberNotFound; a learner goes without more checks;
//   - the voting members that stay must hold a quorum of started members
//     (membership/cluster.go IsReadyToRemoveVotingMember: started means it
//     ran once, not that it runs), else ErrNotEnoughStartedMembers: so the
//     last member is never removed;
//   - a member that is down goes ("downed member is safe to remove");
//   - else the healthy voting members less the one removed must still be
//     a quorum of the voting members, else ErrUnhealthy.
//
// A running member that was removed fails from then on (etcdRemoved).
func (f *Fleet) removeMember(ctx context.Context, c *etcdCluster, id uint64) error {
	if !f.quorum(c) {
		return f.noLeader(ctx)
	}

	f.mu.Lock()
	defer f.mu.Unlock()

	i := slices.IndexFunc(c.members, func(mem *etcdMember) bool { return mem.id == id })
	if i < 0 {
		return errMemberNotFound
	}

	gone := c.members[i]

	if !gone.learner {
		voting, started, healthy := 0, 0, 0

		for _, mem := range c.members {
			if mem.learner {
				continue
			}

			voting++

			if memberHealthy(*mem) {
				healthy++
			}

			if mem.id != id && mem.name != "" {
				started++
			}
		}

		if started < (voting-1)/2+1 {
			return errNotEnoughStarted
		}

		if memberHealthy(*gone) && healthy-1 < 1+(voting-1)/2 {
			return errUnhealthy
		}
	}

	c.members = slices.Delete(c.members, i, i+1)

	m := gone.m
	m.mu.Lock()
	if m.etcdID == id && m.etcdCluster == c {
		m.etcdRemoved = time.Now()
	} else if m.etcdCluster == c && m.etcdID == 0 {
		m.etcdCluster, m.etcdLearner = nil, 0 // a learner: its join is over
		m.joinGen++
	}
	m.mu.Unlock()

	f.log.Info("sim: etcd member removed", "machine", m.name, "member", fmt.Sprintf("%016x", id))

	go m.sync()

	return nil
}

// noLeader is what a call WithRequireLeader gets from a cluster without
// quorum: etcd answers "no leader" once its election timeout passed
// (etcd's default, 1s), or the caller's deadline comes first.
func (f *Fleet) noLeader(ctx context.Context) error {
	if err := sleepCtx(ctx, time.Second); err != nil {
		return err
	}

	return errNoLeader
}

// EtcdRemoveMemberByID removes a member through the etcd cluster the
// node's client reaches (v1alpha1_server.go EtcdRemoveMemberByID):
// Unimplemented on a worker; NotFound for an unknown member; etcd's other
// refusals (removeMember) wrapped, code Unknown. The node itself need not
// run etcd: its client dials the control planes.
func (a *machineAPI) EtcdRemoveMemberByID(ctx context.Context, in *machine.EtcdRemoveMemberByIDRequest) (*machine.EtcdRemoveMemberByIDResponse, error) {
	t, s := target(ctx)

	if err := onlyControlPlane(s, "etcd remove member"); err != nil {
		return nil, err
	}

	c := a.fleet.clusterReachedFrom(t)
	if c == nil {
		return nil, status.Error(codes.Unknown, "failed to create etcd client: "+a.fleet.waitForEtcd(ctx).Error())
	}

	err := a.fleet.removeMember(ctx, c, in.GetMemberId())

	switch {
	case err == nil:
		return &machine.EtcdRemoveMemberByIDResponse{Messages: []*machine.EtcdRemoveMemberByID{{}}}, nil
	case errors.Is(err, errMemberNotFound):
		return nil, status.Errorf(codes.NotFound, "failed to remove member %d: %s", in.GetMemberId(), err)
	default:
		return nil, status.Error(status.FromContextError(err).Code(), fmt.Sprintf("failed to remove member: failed to remove member %d: %s", in.GetMemberId(), err))
	}
}

// EtcdLeaveCluster removes the node's own member, then stops its etcd and
// deletes its data (v1alpha1_server.go EtcdLeaveCluster, etcd.go
// Client.LeaveCluster).
func (a *machineAPI) EtcdLeaveCluster(ctx context.Context, _ *machine.EtcdLeaveClusterRequest) (*machine.EtcdLeaveClusterResponse, error) {
	t, s := target(ctx)

	if err := onlyControlPlane(s, "etcd leave"); err != nil {
		return nil, err
	}

	if err := t.leaveEtcd(ctx); err != nil {
		return nil, status.Error(status.FromContextError(err).Code(), "failed to leave cluster: "+err.Error())
	}

	return &machine.EtcdLeaveClusterResponse{Messages: []*machine.EtcdLeaveCluster{{}}}, nil
}

// leaveEtcd is Client.LeaveCluster: the local member ID from the node's
// etcd Member resource (GetLocalMemberID waits up to three minutes for it
// to exist: a node whose etcd never ran has none), the removal retried
// every ten seconds for up to five minutes while etcd answers unhealthy
// (ErrMemberNotFound counts as done), then etcd stopped and its data
// deleted. Until the next boot the node's etcd stays stopped; after it,
// a control plane without data joins again, as on Talos.
func (m *Machine) leaveEtcd(ctx context.Context) error {
	f := m.fleet

	c := f.clusterReachedFrom(m)
	if c == nil {
		return fmt.Errorf("failed to create etcd client: %w", f.waitForEtcd(ctx))
	}

	id := m.etcdMemberID()
	if id == 0 {
		wctx, cancel := context.WithTimeout(ctx, localMemberWait)
		defer cancel()

		<-wctx.Done()

		return fmt.Errorf("failed to get local etcd member ID: %w", wctx.Err())
	}

	rctx, cancel := context.WithTimeout(ctx, leaveRetryFor)
	defer cancel()

	for {
		err := f.removeMember(rctx, c, id)
		if errors.Is(err, errMemberNotFound) {
			err = nil
		}

		if err == nil {
			break
		}

		if !errors.Is(err, errUnhealthy) {
			return fmt.Errorf("failed to remove member %d: %w", id, err)
		}

		if serr := sleepCtx(rctx, leaveRetry); serr != nil {
			return fmt.Errorf("failed to remove member %d: %w", id, err)
		}
	}

	m.mu.Lock()
	m.etcdID, m.etcdCluster, m.etcdRemoved, m.etcdLearner = 0, nil, time.Time{}, 0
	m.etcdStopped = time.Now()
	m.joinGen++
	m.mu.Unlock()

	f.log.Info("sim: left etcd; etcd stopped, data deleted", "machine", m.name)

	m.sync()

	return nil
}
