package sim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdCluster is one etcd cluster of the fleet: the control plane that was
// bootstrapped, then every control plane that joined it. Talos guards
// Bootstrap per node only (v1alpha1_server.go Bootstrap checks the local
// data directory), so a second Bootstrap on a control plane without data
// makes a second cluster: a fleet may hold several.
type etcdCluster struct {
	members []*etcdMember
	nextID  uint64
	// revision is the key space's revision (etcd's starts at 1) and kvs
	// every revision of every key, oldest first, as etcd's key bucket
	// holds them until a compaction: the sim's own keys, one per member
	// when its etcd started (see put), for what an etcd snapshot carries.
	revision int64
	kvs      []etcdKV
	// lead is the member elected leader (see leader); 0 while there is
	// none.
	lead uint64
	// upgradeHolder holds the Talos upgrade mutex (Upgrade's
	// tryLockUpgradeMutex); nil while it is free.
	upgradeHolder *upgradeSession
}

// etcdMember is one member of a cluster. A joining control plane is added as
// a learner first (services/etcd.go addMember: MemberAddAsLearner); it has
// no name until its etcd starts, and is promoted once started.
type etcdMember struct {
	m       *Machine
	id      uint64
	learner bool
	// name is the member's name once its etcd started (it published its
	// attributes): etcd keeps it while the member is down or wiped, and
	// counts the member as started (IsStarted) from then on.
	name string
}

// memberView is a member as EtcdMemberList shows it.
type memberView struct {
	id      uint64
	name    string // empty until the member's etcd started
	host    string
	learner bool
}

// hasEtcd reports whether any etcd cluster runs: the condition for the
// control plane's static pods, so for an API server the kubelets can post to.
func (f *Fleet) hasEtcd() bool {
	f.mu.Lock()
	defer f.mu.Unlock()

	return len(f.etcd) > 0
}

// bootstrapEtcd creates a new cluster on m, or reports that m holds etcd
// data. A learner entry m had in another cluster stays there, as it would
// on Talos.
func (f *Fleet) bootstrapEtcd(m *Machine) (created bool) {
	return f.bootstrapEtcdFrom(m, nil)
}

// bootstrapEtcdFrom is bootstrapEtcd, the key space restored from a
// snapshot when from is set (a recovery): its revision and keys, in a new
// single-member cluster with new member IDs, as etcdutl's restore makes.
func (f *Fleet) bootstrapEtcdFrom(m *Machine, from *servedSnapshot) (created bool) {
	f.mu.Lock()

	if m.etcdDataDirFull() {
		f.mu.Unlock()

		return false
	}

	c := &etcdCluster{nextID: 0x5a1d0c3e7f2b9a01 + uint64(f.clustersMade)*0x7e57c1a5, revision: 1}
	f.clustersMade++

	if from != nil {
		c.revision, c.kvs = from.revision, slices.Clone(from.kvs)
	}

	id := c.add(m, false)
	c.members[len(c.members)-1].name = m.snap().hostname()
	c.put(memberKey(m.snap().hostname()), fmt.Sprintf("started %016x", id))

	m.mu.Lock()
	m.etcdID, m.etcdCluster, m.etcdLearner, m.etcdSince = id, c, 0, time.Now()
	m.joinGen++ // a join in flight is over: this node now runs its own cluster
	// BootstrapEtcd replaced a service whose join had failed
	m.etcdFailed, m.etcdFailure = time.Time{}, ""
	m.mu.Unlock()

	f.etcd = append(f.etcd, c)
	splits := len(f.etcd)
	f.mu.Unlock()

	if splits > 1 {
		f.log.Warn("sim: a second etcd cluster was bootstrapped: etcd is split", "machine", m.name, "clusters", splits)
	}

	m.sync()

	for _, other := range f.Machines() {
		if other != m {
			f.joinEtcd(other)
			other.sync() // an API server can run now: KubePrism has upstreams
		}
	}

	return true
}

// learner is the cluster's learner, nil when it has none; the caller
// holds the fleet's lock.
func (c *etcdCluster) learner() *etcdMember {
	for _, mem := range c.members {
		if mem.learner {
			return mem
		}
	}

	return nil
}

func (c *etcdCluster) add(m *Machine, learner bool) uint64 {
	id := c.nextID
	c.nextID += 0x1f3c5a7
	c.members = append(c.members, &etcdMember{m: m, id: id, learner: learner})

	return id
}

// joinEtcd starts a configured, booted control plane without etcd data
// joining the oldest cluster: it is added as a learner now and started and
// promoted after the join delay. A node already joining (it rebooted while
// it was) is given the rest of its join again.
func (f *Fleet) joinEtcd(m *Machine) {
	if !m.snap().etcdFailed.IsZero() {
		return // the service failed (etcd_join.go): it joins nothing until a boot
	}

	// Talos retries the join (buildInitialCluster: retry.Constant for
	// EtcdJoinTimeout, every 3s), the service Preparing meanwhile
	retry := func() {
		gen := m.bootGeneration()
		time.AfterFunc(max(f.joinDelay, 100*time.Millisecond), func() {
			if m.bootGeneration() == gen {
				f.joinEtcd(m)
			}
		})
	}

	if !f.replaceStale(m) {
		retry()

		return
	}

	f.mu.Lock()
	defer f.mu.Unlock()

	if s := m.snap(); len(f.etcd) == 0 || !m.isReadyControlPlane() || m.etcdDataDirFull() || !s.etcdStopped.IsZero() || !s.etcdFailed.IsZero() {
		// EtcdLeaveCluster stopped its etcd, or its service failed: it
		// stays so until a boot
		return
	}

	m.mu.Lock()
	if m.etcdCluster == nil {
		if other := f.etcd[0].learner(); other != nil {
			// etcd admits one learner at a time (etcd v3.6
			// membership/cluster.go ValidateConfigurationChange,
			// ValidateMaxLearnerConfig with the default --max-learners 1):
			// MemberAddAsLearner fails "etcdserver: too many learner
			// members in cluster" and addMember is tried again
			m.mu.Unlock()
			f.log.Info("sim: etcd join waits: another member is a learner", "machine", m.name, "learner", fmt.Sprintf("%016x", other.id))
			retry()

			return
		}

		m.etcdCluster = f.etcd[0]
		m.etcdLearner = m.etcdCluster.add(m, true)
	}
	m.joinGen++
	gen := m.joinGen
	m.mu.Unlock()

	time.AfterFunc(f.joinDelay, func() { f.promote(m, gen) })
}

// replaceStale is the start of Talos' join (services/etcd.go addMember,
// called by buildInitialCluster only when the data directory is empty): a
// member with the joining node's hostname, left by its previous life (a
// wiped disk: a reset that did not leave), is removed first, as
// MemberRemove under etcd's strict reconfiguration check (removeMember).
// It reports false when that removal was refused; true when there was
// nothing to remove, or nothing to join.
func (f *Fleet) replaceStale(m *Machine) bool {
	f.mu.Lock()

	if len(f.etcd) == 0 || !m.isReadyControlPlane() || m.etcdDataDirFull() {
		f.mu.Unlock()

		return true
	}

	m.mu.Lock()
	joining := m.etcdCluster != nil // added as a learner already: this join is past addMember
	m.mu.Unlock()

	c, host := f.etcd[0], m.snap().hostname()

	var stale []uint64

	for _, mem := range c.members {
		if !joining && mem.name == host {
			stale = append(stale, mem.id)
		}
	}
	f.mu.Unlock()

	for _, id := range stale {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := f.removeMember(ctx, c, id)

		cancel()

		if err != nil {
			f.log.Info("sim: etcd join waits: the member of the same name could not be removed", "machine", m.name, "member", fmt.Sprintf("%016x", id), "error", err)

			return false
		}

		f.log.Info("sim: etcd join removed the member of the same name left by the machine's previous life", "machine", m.name, "member", fmt.Sprintf("%016x", id))
	}

	return true
}

// promote starts a learner's etcd and makes it a voting member.
func (f *Fleet) promote(m *Machine, gen int) {
	f.mu.Lock()

	if !m.isReadyControlPlane() {
		f.mu.Unlock()

		return // down: joinEtcd gives it its join again when it boots
	}

	host := m.snap().hostname()

	m.mu.Lock()
	ok := m.joinGen == gen && m.etcdID == 0 && m.etcdCluster != nil
	if ok {
		ok = false

		for _, mem := range m.etcdCluster.members {
			if mem.m == m {
				mem.learner = false
				mem.name = host
				m.etcdID, m.etcdLearner, m.etcdSince = mem.id, 0, time.Now()
				ok = true
			}
		}
	}
	c, id := m.etcdCluster, m.etcdID
	m.mu.Unlock()

	if ok {
		c.put(memberKey(m.snap().hostname()), fmt.Sprintf("started %016x", id))
	}
	f.mu.Unlock()

	if ok {
		m.sync()
	}
}

// etcdMembersOf returns the members of m's cluster as m's etcd sees them
// and its leader (see leader): 0 while the cluster has no quorum; nil
// while m's etcd does not run.
func (f *Fleet) etcdMembersOf(m *Machine) (members []memberView, leader uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()

	s := m.snap()
	if !s.etcdRunning() {
		return nil, 0
	}

	m.mu.Lock()
	c := m.etcdCluster
	m.mu.Unlock()

	return c.views(), c.leader()
}

// errLearner is etcd's answer to a learner asked what only voting members
// serve (rpctypes.ErrGRPCNotSupportedForLearner, v3rpc interceptor.go: a
// learner serves Status, serializable Range and the Snapshot stream only).
// Talos passes the client's error on as it is: code Unknown.
const errLearner = "etcdserver: rpc not supported for learner"

// learnerOf returns m's member ID and its cluster's leader while m's etcd
// runs as a learner; 0 otherwise.
func (f *Fleet) learnerOf(m *Machine) (id, leader uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()

	s := m.snap()
	if !s.learnerRunning() {
		return 0, 0
	}

	m.mu.Lock()
	c := m.etcdCluster
	m.mu.Unlock()

	if c == nil {
		return 0, 0
	}

	return s.etcdLearner, c.leader()
}

// views are the cluster's members as EtcdMemberList shows them, in the
// order they were added; the caller holds the fleet's lock.
func (c *etcdCluster) views() (members []memberView) {
	for _, mem := range c.members {
		members = append(members, memberView{id: mem.id, name: mem.name, host: mem.m.snap().host, learner: mem.learner})
	}

	return members
}

// leader is the member every running member of the cluster names as its
// leader, as etcd's raft (go.etcd.io/raft, CheckQuorum and PreVote on, as
// etcd runs it) keeps one: only while more than half of the voting members
// are healthy (memberHealthy: running and reachable) can one be elected,
// and then it is one of them. A leader keeps its place while it stays
// healthy and the cluster keeps quorum; when it goes down the first
// healthy voting member takes over at once (etcd takes its election
// timeout, 1s by default, which Talos keeps). Without quorum it is 0, and
// each member that still runs reports no leader (EtcdStatus,
// EtcdMemberList). The caller holds the fleet's lock.
func (c *etcdCluster) leader() uint64 {
	voters, healthy, first, stays := 0, 0, uint64(0), false

	for _, mem := range c.members {
		if mem.learner {
			continue
		}

		voters++

		if memberHealthy(*mem) {
			healthy++

			if first == 0 {
				first = mem.id
			}

			stays = stays || mem.id == c.lead
		}
	}

	switch {
	case healthy*2 <= voters:
		c.lead = 0
	case !stays:
		c.lead = first
	}

	return c.lead
}

// etcd's client retries a refused call that is safe to repeat this many
// times, this far apart with one endpoint (go.etcd.io/etcd/client/v3
// options.go defaultUnaryMaxRetries, defaultBackoffWaitBetween).
const (
	etcdRetries      = 100
	etcdRetryBackoff = 25 * time.Millisecond
)

// memberListNoLeader is EtcdMemberList's answer on a member that runs
// without a leader (Talos v1.11.0 and v1.14.1 v1alpha1_server.go
// EtcdMemberList: clientv3.WithRequireLeader, then the linearizable
// MemberList). etcd's gRPC interceptor refuses a call that requires a
// leader while it has none (server/etcdserver/api/v3rpc/interceptor.go
// newUnaryInterceptor: rpctypes.ErrGRPCNoLeader, code Unavailable); the
// client's retry interceptor takes Unavailable as safe to retry for
// MemberList (client/v3 retry.go isSafeRetryImmutableRPC, repeatable) and
// tries 100 times (options.go defaultUnaryMaxRetries), 25ms apart on a
// local client's one endpoint (client.go roundRobinQuorumBackoff), the
// fleet's EtcdNoLeaderWait; it then returns rpctypes' EtcdError, which
// carries no gRPC status, and machined returns it unwrapped: the caller
// gets "etcdserver: no leader", code Unknown. The caller's deadline ends
// the retries first when it is sooner.
func (f *Fleet) memberListNoLeader(ctx context.Context) error {
	if err := sleepCtx(ctx, f.noLeaderWait); err != nil {
		return status.FromContextError(err).Err()
	}

	return status.Error(codes.Unknown, errNoLeader.Error())
}

// etcdNotRunning is what an etcd client call answers on a control plane
// whose etcd does not run (internal/pkg/etcd/etcd.go NewClient): right
// after boot the admin certificate it loads does not exist yet (a plain
// error, code Unknown); later the client waits for an endpoint that never
// answers until the caller's deadline, modelled by the fleet's
// EtcdClientWait. Never Unavailable, never at once.
func (f *Fleet) etcdNotRunning(ctx context.Context, s snapshot) error {
	if time.Since(s.booted) < f.criDelay {
		return status.Error(codes.Unknown, "error building etcd client TLS config: open /system/secrets/etcd/admin.crt: no such file or directory")
	}

	t := time.NewTimer(f.etcdWait)
	defer t.Stop()

	select {
	case <-ctx.Done():
	case <-t.C:
	}

	return status.Error(codes.DeadlineExceeded, "context deadline exceeded")
}
