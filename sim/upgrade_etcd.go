package sim

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// What Upgrade checks on a control plane unless forced
// (v1alpha1_server.go Upgrade): an etcd client from the control planes'
// endpoints (internal/pkg/etcd NewClientFromControlPlaneIPs), the upgrade
// mutex (tryLockUpgradeMutex), then etcd's ValidateForUpgrade
// (internal/pkg/etcd/etcd.go). Errors carry machined's words; plain
// errors reach the caller as Unknown, wrapped context errors as their
// own code (grpc-go's server: status.FromContextError).

// checkEtcdForUpgrade runs the checks for t. Once the mutex is held it
// returns its unlock, to be called when the call is done: the mutex
// guards only the checks.
func (f *Fleet) checkEtcdForUpgrade(ctx context.Context, t *Machine, s snapshot) (unlock func(), err error) {
	c, err := f.upgradeEtcdClient(t, s)
	if err != nil {
		return nil, err
	}

	if unlock, err = f.tryLockUpgradeMutex(ctx, c, t); err != nil {
		return nil, err
	}

	if err = f.validateForUpgrade(ctx, c); err != nil {
		return unlock, err
	}

	return unlock, nil
}

// upgradeEtcdClient is the cluster behind the control planes' endpoints:
// the node's own, else the one it would join. The Endpoints come from the
// API server's EndpointSlices (controllers/k8s/endpoint.go), which exist
// once some etcd cluster does; the client's TLS config needs the node's
// etcd admin certificate, which appears CRIStartDelay after a boot.
func (f *Fleet) upgradeEtcdClient(t *Machine, s snapshot) (*etcdCluster, error) {
	f.mu.Lock()
	defer f.mu.Unlock()

	t.mu.Lock()
	c := t.etcdCluster
	t.mu.Unlock()

	if c == nil && len(f.etcd) > 0 {
		c = f.etcd[0]
	}

	switch {
	case c == nil:
		return nil, status.Error(codes.Unknown, "failed to create etcd client: no controlplane endpoints discovered yet")
	case time.Since(s.booted) < f.criDelay:
		return nil, status.Error(codes.Unknown, "failed to create etcd client: error building etcd client TLS config: open /system/secrets/etcd/admin.crt: no such file or directory")
	}

	return c, nil
}

// tryLockUpgradeMutex takes the cluster's upgrade mutex for t. Its
// session's lease needs a quorum: without one the grant waits as an etcd
// client does (waitForEtcd). A held mutex fails at once, as
// concurrency.Mutex.TryLock does.
func (f *Fleet) tryLockUpgradeMutex(ctx context.Context, c *etcdCluster, t *Machine) (func(), error) {
	if !f.quorum(c) {
		err := f.waitForEtcd(ctx)

		return nil, status.Error(status.FromContextError(err).Code(), "failed to acquire upgrade mutex: error establishing etcd concurrency session: "+err.Error())
	}

	f.mu.Lock()
	defer f.mu.Unlock()

	if c.upgradeHolder != nil {
		return nil, status.Error(codes.Unknown, "failed to acquire upgrade mutex: error trying to lock etcd upgrade mutex: mutex: Locked by another session")
	}

	holder := &upgradeSession{holder: t}
	c.upgradeHolder = holder

	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()

		if c.upgradeHolder == holder {
			c.upgradeHolder = nil
		}
	}, nil
}

// upgradeSession is one etcd concurrency session holding a cluster's
// upgrade mutex.
type upgradeSession struct{ holder *Machine }

// quorum: more than half of the cluster's voting members are healthy.
func (f *Fleet) quorum(c *etcdCluster) bool {
	voters, healthy := 0, 0

	for _, mem := range f.etcdMembers(c) {
		if mem.learner {
			continue
		}

		voters++

		if memberHealthy(mem) {
			healthy++
		}
	}

	return healthy*2 > voters
}

// memberHealthy: the member's etcd runs and can be reached. A machine
// that is down or Unreachable, or whose upgrade stopped its etcd, is not.
func memberHealthy(mem etcdMember) bool {
	s := mem.m.snap()

	return s.etcdID == mem.id && s.etcdRunning() && !s.faults.Unreachable
}

// validateForUpgrade is etcd.go ValidateForUpgrade over the member list
// (learners included, by ID as etcd lists them): two members are refused
// outright, then each member in turn must have started (a name) and
// answer a Get through its own client URLs (validateMemberHealth,
// ValidateQuorum). That Get takes the member's Latency; one that cannot
// be reached waits (waitForEtcd; Talos' QuorumCheckTimeout is 15s).
func (f *Fleet) validateForUpgrade(ctx context.Context, c *etcdCluster) error {
	members := f.etcdMembers(c)

	const prefix = "error validating etcd for upgrade: "

	if len(members) == 2 {
		return status.Errorf(codes.Unknown, prefix+"etcd member count(%d) is insufficient to maintain quorum if upgrade commences", len(members))
	}

	for _, mem := range members {
		ms := mem.m.snap()

		if ms.etcdID != mem.id {
			return status.Errorf(codes.Unknown, prefix+"etcd member %016x is not started, all members must be running to perform an upgrade", mem.id)
		}

		err := sleepCtx(ctx, ms.faults.Latency)
		if err == nil && !memberHealthy(mem) {
			err = f.waitForEtcd(ctx)
		}

		if err != nil {
			return status.Error(status.FromContextError(err).Code(),
				fmt.Sprintf(prefix+"etcd member %016x is not healthy; all members must be healthy to perform an upgrade: %s", mem.id, err))
		}
	}

	return nil
}

// etcdMembers copies the cluster's members, which joins and promotions
// change under the fleet's lock.
func (f *Fleet) etcdMembers(c *etcdCluster) []etcdMember {
	f.mu.Lock()
	defer f.mu.Unlock()

	out := make([]etcdMember, 0, len(c.members))
	for _, mem := range c.members {
		out = append(out, *mem)
	}

	return out
}

// waitForEtcd waits as an etcd client call on an endpoint that does not
// answer: until the caller's deadline, or the fleet's EtcdClientWait if
// that comes first. It returns the context error the call ends with.
func (f *Fleet) waitForEtcd(ctx context.Context) error {
	if err := sleepCtx(ctx, f.etcdWait); err != nil {
		return err
	}

	return context.DeadlineExceeded
}

// sleepCtx sleeps for d, or returns ctx's error if it ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}

	t := time.NewTimer(d)
	defer t.Stop()

	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
