package reconcile_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/reconcile"
)

type instance struct {
	*loopHarness
	elect  *reconcile.LeaderElection
	cancel context.CancelFunc
	done   chan struct{}
}

func startInstance(t *testing.T, kc kubernetes.Interface, f *simtest.Fleet, id string) *instance {
	h := newLoop(t, f)
	e := &reconcile.LeaderElection{
		Client: kc, Namespace: "devata", Name: "devata-reconcile", Identity: id,
		LeaseDuration: 2 * time.Second, RenewDeadline: 1500 * time.Millisecond, RetryPeriod: 200 * time.Millisecond,
		Log: h.opts.Log, Metrics: h.opts.Metrics,
	}
	h.opts.Leading = e.Leading
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{loopHarness: h, elect: e, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(in.done)
		if err := e.Run(ctx, h.loop().Run); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}()
	t.Cleanup(func() { cancel(); <-in.done })
	return in
}

func (in *instance) machinesActedOn(t *testing.T) (names map[string]bool, first, last time.Time) {
	names = map[string]bool{}
	for _, r := range in.audit.records(t) {
		names[r.Machine] = true
		if first.IsZero() {
			first = r.Time
		}
		last = r.Time
	}
	return names, first, last
}

func TestOnlyTheLeaderActsAndAStandbyTakesOver(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: f.Inventory.Cluster.Network.ServiceSubnets})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "devata"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	a := startInstance(t, kc, f, "a")
	a.waitFor(t, 10*time.Second, "a to lead", a.elect.Leading)
	b := startInstance(t, kc, f, "b")
	a.waitFor(t, 10*time.Second, "a's first pass", func() bool { return a.metric(t, "devata_reconcile_passes_total") >= 1 })

	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	a.waitFor(t, 10*time.Second, "worker-1 to converge", func() bool { return a.inSync(t, "worker-1") })
	if b.elect.Leading() || b.metric(t, "devata_reconcile_leader") != 0 || b.metric(t, "devata_reconcile_passes_total") != 0 {
		t.Fatal("b acted while a led")
	}
	if a.metric(t, "devata_reconcile_leader") != 1 {
		t.Error("a's devata_reconcile_leader is not 1")
	}

	// Kill a: it stops renewing and does not release the lease.
	killed := time.Now()
	a.cancel()
	<-a.done
	b.waitFor(t, 10*time.Second, "b to take over", b.elect.Leading)
	took := time.Since(killed)
	t.Logf("b took over %s after a was killed (lease %s)", took.Round(time.Millisecond), b.elect.LeaseDuration)
	if limit := b.elect.LeaseDuration + 2*b.elect.RetryPeriod + time.Second; took > limit {
		t.Errorf("takeover took %s, want within the lease duration (%s)", took, limit)
	}

	f.Drift(t, "worker-2", "time.cloudflare.com", "pool.ntp.org")
	b.waitFor(t, 10*time.Second, "worker-2 to converge", func() bool { return b.inSync(t, "worker-2") })

	aNames, _, aLast := a.machinesActedOn(t)
	bNames, bFirst, _ := b.machinesActedOn(t)
	if len(aNames) != 1 || !aNames["worker-1"] || len(bNames) != 1 || !bNames["worker-2"] {
		t.Errorf("a acted on %v, b on %v; want worker-1 by a and worker-2 by b only", aNames, bNames)
	}
	if !bFirst.After(aLast) {
		t.Errorf("b acted at %s, before a's last action at %s", bFirst, aLast)
	}
	for name, want := range map[string]int{"worker-1": 1, "worker-2": 1, "cp-1": 0, "cp-2": 0, "cp-3": 0} {
		if got := writes(f.Sim.Machine(name)); got != want {
			t.Errorf("%s got %d config writes, want %d", name, got, want)
		}
	}
}
