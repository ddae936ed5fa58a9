package lock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaseSpec names the cluster's writer Lease: the coordination.k8s.io Lease
// that `devata reconcile --leader-elect` campaigns for. A writer that holds
// it (a human's apply, a reconcile without leader election) keeps the
// reconcile Deployment standing by, and a reconcile leader that holds it
// refuses that writer, on whichever host it runs. The record written is
// client-go's LeaderElectionRecord (tools/leaderelection/resourcelock), so
// both sides read it the same way.
type LeaseSpec struct {
	Client          kubernetes.Interface
	Namespace, Name string
	// Duration is how long the Lease is valid after each renewal (default
	// 15 s, as reconcile's --lease-duration); it is renewed every third of it.
	Duration time.Duration
}

// LeaseHeldError is returned when another writer holds the cluster's Lease.
type LeaseHeldError struct {
	Namespace, Name string
	Holder          string
	Since, Renewed  time.Time
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("another writer holds the cluster's Lease %s/%s: %q (since %s, renewed %s ago); wait for it to finish, or pass --wait-lock DURATION to wait (kubectl -n %s get lease %s shows the holder; a holder that died without releasing it loses it once it is not renewed for its duration)",
		e.Namespace, e.Name, e.Holder, e.Since.Format(time.RFC3339), time.Since(e.Renewed).Round(time.Second), e.Namespace, e.Name)
}

// UnreachableError is returned when the Lease could not be read or
// written for a reason other than another holder: the API did not answer,
// or this user may not touch Leases. The write is refused; see Error.
type UnreachableError struct {
	Namespace, Name string
	Err             error
}

func (e *UnreachableError) Error() string {
	hint := "if the Kubernetes API is down (the cluster is what you are repairing), no in-cluster writer can renew a Lease either: rerun with --no-lease to take only this host's lock"
	if apierrors.IsForbidden(e.Err) {
		hint = fmt.Sprintf("grant this user get, list, create and update on leases in namespace %s, or rerun with --no-lease to take only this host's lock", e.Namespace)
	}
	return fmt.Sprintf("take the cluster's Lease %s/%s: %v; nothing was written; %s", e.Namespace, e.Name, e.Err, hint)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// NoNamespaceError is returned when the Lease's namespace does not exist:
// no reconcile Deployment runs there, and the caller decides whether the
// host's lock alone is enough.
type NoNamespaceError struct{ Namespace string }

func (e *NoNamespaceError) Error() string {
	return fmt.Sprintf("namespace %s does not exist, so no reconcile Deployment campaigns there and the cluster's Lease was not taken (kubectl create namespace %s makes writers on different hosts exclude each other)", e.Namespace, e.Namespace)
}

// HeldLease is a held writer Lease, renewed until Release.
type HeldLease struct {
	Names    []string // the Leases held: the base name and every shard's
	ctx      context.Context
	lost     context.CancelCauseFunc
	stop     context.CancelFunc
	done     chan struct{}
	locks    []*resourcelock.LeaseLock
	identity string
	duration time.Duration
	mu       sync.Mutex // serialises renewals and Release
}

// Context is done when the Lease is lost (not renewed in time, or taken by
// another writer after it expired): the holder must start no further
// change. context.Cause says why.
func (h *HeldLease) Context() context.Context { return h.ctx }

// shardName matches the Leases of sharded reconcilers: <name>-<i>-of-<N>.
func shardName(base string) *regexp.Regexp {
	return regexp.MustCompile("^" + regexp.QuoteMeta(base) + `-[0-9]+-of-[0-9]+$`)
}

// Identity is the holder identity a devata writer writes into the Lease:
// readable by whoever is refused (and by reconcile, which logs it while it
// stands by).
func Identity(me Holder) string {
	id := fmt.Sprintf("%s pid %d: %s", me.Host, me.PID, me.Command)
	if len(id) > 240 {
		id = id[:240] + "…"
	}
	return id
}

// Acquire takes the writer Lease for identity, and the Lease of every
// shard that exists (a sharded reconcile holds one Lease per shard), all
// or none. While another writer holds one, it waits up to wait (0: not at
// all), polling, and then returns a *LeaseHeldError. ctx bounds the whole
// attempt; the returned Lease's Context derives from it.
func (s LeaseSpec) Acquire(ctx context.Context, identity string, wait time.Duration) (*HeldLease, error) {
	duration := cmp.Or(s.Duration, 15*time.Second)
	deadline := time.Now().Add(wait)
	for {
		h, err := s.tryAcquire(ctx, identity, duration)
		if err == nil {
			return h, nil
		}
		var held *LeaseHeldError
		if !errors.As(err, &held) || !time.Now().Before(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the cluster's Lease %s/%s: %w", s.Namespace, s.Name, ctx.Err())
		case <-time.After(min(time.Second, time.Until(deadline)+time.Millisecond)):
		}
	}
}

func (s LeaseSpec) tryAcquire(ctx context.Context, identity string, duration time.Duration) (*HeldLease, error) {
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	names := []string{s.Name}
	list, err := s.Client.CoordinationV1().Leases(s.Namespace).List(callCtx, metav1.ListOptions{})
	switch {
	case err == nil:
		re := shardName(s.Name)
		for _, l := range list.Items {
			if re.MatchString(l.Name) {
				names = append(names, l.Name)
			}
		}
		slices.Sort(names[1:])
	case apierrors.IsForbidden(err):
		// a user who may get but not list Leases: the base Lease only (a
		// sharded reconcile's Leases cannot be found)
	default:
		return nil, &UnreachableError{Namespace: s.Namespace, Name: s.Name, Err: err}
	}
	h := &HeldLease{Names: names, identity: identity, duration: duration, done: make(chan struct{})}
	for _, name := range names {
		l := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: s.Namespace, Name: name},
			Client:     s.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: identity},
		}
		if err := takeOne(callCtx, l, s.Namespace, name, identity, duration); err != nil {
			h.giveBack(ctx)
			return nil, err
		}
		h.locks = append(h.locks, l)
	}
	h.ctx, h.lost = context.WithCancelCause(ctx)
	var renewCtx context.Context
	renewCtx, h.stop = context.WithCancel(context.WithoutCancel(ctx))
	go h.renew(renewCtx)
	return h, nil
}

// takeOne takes one Lease as client-go's tryAcquireOrRenew would: create
// it, or update it when it is free (no holder, or not renewed within its
// duration). The update carries the resourceVersion read, so of two
// writers racing for a free Lease exactly one wins.
func takeOne(ctx context.Context, l *resourcelock.LeaseLock, ns, name, identity string, duration time.Duration) error {
	now := metav1.NewTime(time.Now())
	rec := resourcelock.LeaderElectionRecord{
		HolderIdentity:       identity,
		LeaseDurationSeconds: max(1, int(duration/time.Second)),
		AcquireTime:          now,
		RenewTime:            now,
	}
	old, _, err := l.Get(ctx)
	switch {
	case apierrors.IsNotFound(err):
		err = l.Create(ctx, rec)
		if apierrors.IsNotFound(err) { // the namespace
			return &NoNamespaceError{Namespace: ns}
		}
		if apierrors.IsAlreadyExists(err) {
			return &LeaseHeldError{Namespace: ns, Name: name, Holder: "a writer that created it a moment ago", Since: now.Time, Renewed: now.Time}
		}
		if err != nil {
			return &UnreachableError{Namespace: ns, Name: name, Err: err}
		}
		return nil
	case err != nil:
		return &UnreachableError{Namespace: ns, Name: name, Err: err}
	}
	valid := old.RenewTime.Add(time.Duration(old.LeaseDurationSeconds) * time.Second).After(now.Time)
	if old.HolderIdentity != "" && old.HolderIdentity != identity && valid {
		return &LeaseHeldError{Namespace: ns, Name: name, Holder: old.HolderIdentity, Since: old.AcquireTime.Time, Renewed: old.RenewTime.Time}
	}
	rec.LeaderTransitions = old.LeaderTransitions
	if old.HolderIdentity != identity {
		rec.LeaderTransitions++
	}
	if err := l.Update(ctx, rec); err != nil {
		if apierrors.IsConflict(err) {
			return &LeaseHeldError{Namespace: ns, Name: name, Holder: "a writer that took it a moment ago", Since: now.Time, Renewed: now.Time}
		}
		return &UnreachableError{Namespace: ns, Name: name, Err: err}
	}
	return nil
}

// renew renews every held Lease each third of its duration. A Lease that
// cannot be renewed for two thirds of its duration (client-go's default
// ratio of renew deadline to lease duration), or that another writer now
// holds, is lost: Context ends, and the holder starts no further change.
func (h *HeldLease) renew(ctx context.Context) {
	defer close(h.done)
	lastOK := time.Now()
	tick := time.NewTicker(h.duration / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		err := h.renewOnce(ctx)
		var held *LeaseHeldError
		switch {
		case err == nil:
			lastOK = time.Now()
		case errors.As(err, &held):
			h.lost(fmt.Errorf("lost the cluster's Lease %s: %w", held.Name, err))
			return
		case time.Since(lastOK) > h.duration*2/3:
			h.lost(fmt.Errorf("could not renew the cluster's Lease for %s: %w", time.Since(lastOK).Round(time.Second), err))
			return
		}
	}
}

func (h *HeldLease) renewOnce(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ctx.Err() != nil {
		return nil
	}
	for _, l := range h.locks {
		callCtx, cancel := context.WithTimeout(ctx, h.duration/3)
		old, _, err := l.Get(callCtx)
		if err == nil && old.HolderIdentity != h.identity {
			cancel()
			return &LeaseHeldError{Namespace: l.LeaseMeta.Namespace, Name: l.LeaseMeta.Name, Holder: old.HolderIdentity, Since: old.AcquireTime.Time, Renewed: old.RenewTime.Time}
		}
		if err == nil {
			rec := *old
			rec.RenewTime = metav1.NewTime(time.Now())
			err = l.Update(callCtx, rec)
		}
		cancel()
		if err != nil {
			return err
		}
	}
	return nil
}

// Release stops renewing and gives every Lease up as client-go does on a
// clean stop (no holder, a one-second duration), so a standby reconcile
// takes over at its next retry instead of after the Lease's duration.
func (h *HeldLease) Release() {
	if h == nil || h.stop == nil {
		return
	}
	h.stop()
	<-h.done
	h.lost(errors.New("released"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.giveBack(ctx)
}

// giveBack frees the Leases this writer still holds.
func (h *HeldLease) giveBack(ctx context.Context) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, l := range h.locks {
		old, _, err := l.Get(ctx)
		if err != nil || old.HolderIdentity != h.identity {
			continue
		}
		now := metav1.NewTime(time.Now())
		_ = l.Update(ctx, resourcelock.LeaderElectionRecord{
			LeaderTransitions: old.LeaderTransitions, LeaseDurationSeconds: 1,
			AcquireTime: now, RenewTime: now,
		})
	}
	h.locks = nil
}
