package reconcile

import (
	"cmp"
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// LeaderElection runs the loop only while this instance holds a Lease, so
// that several replicas (or several replicas per shard) are safe: the others
// stand by. Leader election does not fence, so every action stays idempotent
// and is re-planned from a fresh observation right before it is taken.
type LeaderElection struct {
	Client          kubernetes.Interface
	Namespace, Name string
	Identity        string
	LeaseDuration   time.Duration
	RenewDeadline   time.Duration
	RetryPeriod     time.Duration
	// Release gives the lease up after a clean stop, so that a standby takes
	// over at once instead of after LeaseDuration.
	Release bool
	Log     *slog.Logger
	Metrics *Metrics

	leading atomic.Bool
}

// Leading reports whether this instance holds the lease and may act.
func (e *LeaderElection) Leading() bool { return e.leading.Load() }

// Run campaigns until ctx is done. While it leads, it runs lead with a
// context that ends when the lease is lost or ctx is done; when ctx is done,
// the lease is kept (and renewed) until lead has returned, so no other
// instance acts while this one finishes its changes in flight. A lost lease
// ends lead, waits for it, and campaigns again.
func (e *LeaderElection) Run(ctx context.Context, lead func(ctx context.Context) error) error {
	log := e.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	// The election outlives ctx until lead has finished; see above.
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()
	stopWatch := context.AfterFunc(ctx, func() {
		if !e.leading.Load() {
			cancelElect()
		}
	})
	defer stopWatch()
	for ctx.Err() == nil {
		done := make(chan struct{})
		var started atomic.Bool
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            e.Name,
			LeaseDuration:   cmp.Or(e.LeaseDuration, 15*time.Second),
			RenewDeadline:   cmp.Or(e.RenewDeadline, 10*time.Second),
			RetryPeriod:     cmp.Or(e.RetryPeriod, 2*time.Second),
			ReleaseOnCancel: e.Release,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(lctx context.Context) {
					started.Store(true)
					defer close(done)
					runCtx, cancel := context.WithCancel(lctx)
					defer cancel()
					stop := context.AfterFunc(ctx, cancel)
					defer stop()
					e.leading.Store(true)
					e.Metrics.SetLeader(true)
					log.Info("leading: this instance acts", "lease", e.Namespace+"/"+e.Name, "identity", e.Identity)
					if err := lead(runCtx); err != nil {
						log.Error("reconcile loop ended", "error", err)
					}
					e.leading.Store(false)
					e.Metrics.SetLeader(false)
					if ctx.Err() != nil {
						cancelElect() // done: now the lease may go
					}
				},
				OnStoppedLeading: func() {
					e.leading.Store(false)
					e.Metrics.SetLeader(false)
					if ctx.Err() == nil {
						log.Warn("lost the lease: stopped acting; campaigning again", "lease", e.Namespace+"/"+e.Name)
					}
				},
				OnNewLeader: func(id string) {
					if id != e.Identity {
						log.Info("standing by", "leader", id, "lease", e.Namespace+"/"+e.Name)
					}
				},
			},
		})
		if err != nil {
			return err
		}
		le.Run(electCtx)
		if started.Load() {
			<-done // never campaign again while the last term's work is in flight
		}
	}
	return nil
}
