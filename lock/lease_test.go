package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/lock"
	"devata.dev/devata/reconcile"
)

func leaseCluster(t *testing.T) kubernetes.Interface {
	t.Helper()
	env := testenv.Start(t)
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "devata"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return kc
}

// The cluster-wide half of issue 15's writer lock: a human's apply on one
// host and a reconcile Deployment (or another human) on another exclude
// each other through the same Lease --leader-elect campaigns for.
func TestLeaseExcludesWritersAcrossHosts(t *testing.T) {
	kc := leaseCluster(t)
	spec := lock.LeaseSpec{Client: kc, Namespace: "devata", Name: "devata-reconcile", Duration: 3 * time.Second}
	laptop := lock.Identity(lock.Holder{Host: "ops-laptop", PID: 4242, Command: "devata apply --machines cp-2"})
	desk := lock.Identity(lock.Holder{Host: "ops-desk", PID: 7, Command: "devata apply"})

	t.Run("a second writer is refused, naming the holder", func(t *testing.T) {
		held, err := spec.Acquire(t.Context(), laptop, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = spec.Acquire(t.Context(), desk, 0)
		var he *lock.LeaseHeldError
		if !errors.As(err, &he) || he.Holder != laptop || !strings.Contains(err.Error(), `"ops-laptop pid 4242: devata apply --machines cp-2"`) || !strings.Contains(err.Error(), "--wait-lock") {
			t.Fatalf("second writer: %v", err)
		}
		// the holder renews: after more than the Lease's duration it is still held
		time.Sleep(4 * time.Second)
		if _, err := spec.Acquire(t.Context(), desk, 0); !errors.As(err, &he) {
			t.Fatalf("after the Lease's duration, a renewed Lease was taken: %v", err)
		}
		if held.Context().Err() != nil {
			t.Fatalf("the holder lost a Lease it renews: %v", context.Cause(held.Context()))
		}
		held.Release()
		next, err := spec.Acquire(t.Context(), desk, 0)
		if err != nil {
			t.Fatalf("after release: %v", err)
		}
		next.Release()
	})

	t.Run("--wait-lock waits for the holder", func(t *testing.T) {
		held, err := spec.Acquire(t.Context(), laptop, 0)
		if err != nil {
			t.Fatal(err)
		}
		go func() { time.Sleep(time.Second); held.Release() }()
		start := time.Now()
		next, err := spec.Acquire(t.Context(), desk, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if time.Since(start) < 500*time.Millisecond {
			t.Error("took the Lease before its holder released it")
		}
		next.Release()
	})

	t.Run("a holder that died loses it once it expires", func(t *testing.T) {
		// a killed writer leaves a Lease nobody renews
		setHolder(t, kc, spec, "ops-old pid 1: devata apply", time.Now().Add(-time.Minute))
		next, err := spec.Acquire(t.Context(), desk, 0)
		if err != nil {
			t.Fatalf("a Lease not renewed for longer than its duration was not taken: %v", err)
		}
		next.Release()
		// one that was renewed a moment ago is still held
		setHolder(t, kc, spec, "ops-old pid 1: devata apply", time.Now())
		if _, err := spec.Acquire(t.Context(), desk, 0); err == nil {
			t.Fatal("took a Lease renewed a moment ago")
		}
		setHolder(t, kc, spec, "", time.Now())
	})

	t.Run("a holder whose Lease is taken over is told", func(t *testing.T) {
		held, err := spec.Acquire(t.Context(), laptop, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer held.Release()
		setHolder(t, kc, spec, "someone-else", time.Now())
		select {
		case <-held.Context().Done():
			if !strings.Contains(context.Cause(held.Context()).Error(), "someone-else") {
				t.Errorf("cause: %v", context.Cause(held.Context()))
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the writer whose Lease was taken over was not told it lost it")
		}
		setHolder(t, kc, spec, "", time.Now())
	})

	t.Run("shard Leases are taken with the base one", func(t *testing.T) {
		for _, name := range []string{"devata-reconcile-0-of-2", "devata-reconcile-1-of-2"} {
			e := &reconcile.LeaderElection{Client: kc, Namespace: "devata", Name: name, Identity: "shard-pod", LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond}
			<-lead(t, e)
		}
		// both shard leaders hold their Leases: a human writer is refused
		_, err := spec.Acquire(t.Context(), desk, 0)
		var he *lock.LeaseHeldError
		if !errors.As(err, &he) || he.Holder != "shard-pod" || !strings.Contains(he.Name, "-of-2") {
			t.Fatalf("a writer while shard reconcilers lead: %v", err)
		}
	})

	t.Run("no namespace, no Lease", func(t *testing.T) {
		_, err := lock.LeaseSpec{Client: kc, Namespace: "nowhere", Name: "devata-reconcile"}.Acquire(t.Context(), desk, 0)
		var ne *lock.NoNamespaceError
		if !errors.As(err, &ne) || !strings.Contains(err.Error(), "kubectl create namespace nowhere") {
			t.Fatalf("missing namespace: %v", err)
		}
	})
}

// A reconcile leader and a writer holding the Lease exclude each other both
// ways: the leader refuses the writer; the writer keeps a leader standing
// by until it releases, and the standby then leads at its next retry.
func TestLeaseAndLeaderElectionExcludeEachOther(t *testing.T) {
	kc := leaseCluster(t)
	spec := lock.LeaseSpec{Client: kc, Namespace: "devata", Name: "devata-reconcile", Duration: 3 * time.Second}
	human := lock.Identity(lock.Holder{Host: "ops-laptop", PID: 4242, Command: "devata apply"})
	held, err := spec.Acquire(t.Context(), human, 0)
	if err != nil {
		t.Fatal(err)
	}
	e := &reconcile.LeaderElection{Client: kc, Namespace: "devata", Name: "devata-reconcile", Identity: "devata-reconcile-7f9c", LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond, Release: true}
	led := lead(t, e)
	time.Sleep(5 * time.Second) // more than the reconcile's own lease duration
	select {
	case <-led:
		t.Fatal("reconcile led while a human's apply held the Lease")
	default:
	}
	held.Release()
	select {
	case <-led:
	case <-time.After(5 * time.Second):
		t.Fatal("the standby reconcile did not lead after the human released the Lease")
	}
	_, err = spec.Acquire(t.Context(), human, 0)
	var he *lock.LeaseHeldError
	if !errors.As(err, &he) || he.Holder != "devata-reconcile-7f9c" {
		t.Fatalf("apply while reconcile leads: %v", err)
	}
}

// lead runs e in the background until the test ends; the channel closes
// when it starts leading.
func lead(t *testing.T, e *reconcile.LeaderElection) <-chan struct{} {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	led := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = e.Run(ctx, func(ctx context.Context) error {
			close(led)
			<-ctx.Done()
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return led
}

// setHolder writes the Lease's holder and renew time directly, as another
// writer (or one that has since died) would have.
func setHolder(t *testing.T, kc kubernetes.Interface, spec lock.LeaseSpec, holder string, renewed time.Time) {
	t.Helper()
	l, err := kc.CoordinationV1().Leases(spec.Namespace).Get(t.Context(), spec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	at := metav1.NewMicroTime(renewed)
	l.Spec.HolderIdentity = &holder
	l.Spec.RenewTime = &at
	l.Spec.AcquireTime = &at
	d := int32(3)
	l.Spec.LeaseDurationSeconds = &d
	if _, err := kc.CoordinationV1().Leases(spec.Namespace).Update(t.Context(), l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
