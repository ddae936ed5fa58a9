package sim_test

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"devata.dev/devata/sim"
)

// A control plane left unbootstrapped, as Talos v1.11.0 and v1.14.1 treat
// it (services/etcd.go buildInitialCluster: retry.Constant for
// constants.EtcdJoinTimeout; system/service_runner.go: a failed PreFunc
// fails the service, not restarted; v1alpha1_sequencer_tasks.go
// StartAllServices: the boot waits constants.BootTimeout for every
// service; main.go handle: the failed boot reboots): etcd Preparing, then
// Failed with the join's timeout while the stage stays booting, then the
// reboot at the boot timeout, after which etcd waits in Preparing again.
// A Bootstrap on a node whose join failed is taken (BootstrapEtcd replaces
// the failed service). Times are scaled by the fleet's options.
func TestEtcdJoinTimeout(t *testing.T) {
	t.Parallel()

	cp, _ := oldFleetConfigs(t)
	opts := sim.Options{EtcdJoinTimeout: 400 * time.Millisecond, BootTimeout: 1500 * time.Millisecond, RebootDelay: 100 * time.Millisecond, CRIStartDelay: 50 * time.Millisecond}
	for i := range 2 {
		opts.Machines = append(opts.Machines, sim.MachineSpec{Name: fmt.Sprintf("cp-%d", i+1), Role: "controlplane", Config: cp})
	}

	f := startWith(t, opts)
	c2 := admin(t, f.Machine("cp-2").Addr())

	if st := serviceState(t, c2, "etcd"); st != "Preparing" {
		t.Fatalf("etcd before the join timeout: %s, want Preparing", st)
	}

	// its data directory is empty: what tells it from a node with data
	// passing through Preparing (TestEtcdPreparingOnEveryBoot)
	if got := listEtcdDir(t, c2); got != "." {
		t.Errorf("/var/lib/etcd on a control plane waiting to join: %q, want only the directory itself", got)
	}

	until(t, "etcd gives up joining", func() (bool, error) { return serviceState(t, c2, "etcd") == "Failed", nil })

	if ev, want := lastEvent(t, c2, "etcd"), "Failed to run pre stage: failed to build initial etcd cluster: failed to build cluster arguments: timeout"; ev != want {
		t.Errorf("etcd's event: %q, want %q", ev, want)
	}

	if st, _, err := stage(t, c2); err != nil || st != runtime.MachineStageBooting {
		t.Errorf("stage after the join failed: %v (%v), want booting", st, err)
	}

	// nothing restarts it: it stays failed until the boot times out
	time.Sleep(200 * time.Millisecond)

	if st := serviceState(t, c2, "etcd"); st != "Failed" {
		t.Errorf("etcd 200ms after it failed: %s, want still Failed (no restart)", st)
	}

	m2 := f.Machine("cp-2")
	until(t, "the boot times out and cp-2 reboots", func() (bool, error) { return m2.Observe().Down, nil })
	until(t, "cp-2 back", func() (bool, error) { return !m2.Observe().Down, nil })

	c2 = admin(t, m2.Addr())
	if st := serviceState(t, c2, "etcd"); st != "Preparing" {
		t.Errorf("etcd after the reboot: %s, want Preparing again", st)
	}

	// cp-1's join failed too; a bootstrap there is taken, and cp-2 joins
	c1 := admin(t, f.Machine("cp-1").Addr())
	until(t, "cp-1's join fails", func() (bool, error) { return serviceState(t, c1, "etcd") == "Failed", nil })

	if err := c1.Bootstrap(ctxTimeout(t, time.Second), &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap after the join failed: %v", err)
	}

	joined(t, f, 2)
}

// etcd admits one learner at a time (etcd v3.6 membership/cluster.go
// ValidateConfigurationChange, ValidateMaxLearnerConfig; --max-learners
// defaults to 1): two control planes joining at once are added one after
// the other, the second retrying its MemberAddAsLearner (Talos'
// buildInitialCluster) until the first was promoted. Polled through the
// fleet's view of etcd, never more than one learner.
func TestEtcdOneLearnerAtATime(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 300 * time.Millisecond})

	most := 0
	until(t, "every control plane joins, one learner at a time", func() (bool, error) {
		cs := f.EtcdClusters()
		if len(cs) != 1 {
			return false, nil
		}

		most = max(most, len(cs[0].Learners))

		return len(cs[0].Members) == 3 && len(cs[0].Learners) == 0, nil
	})

	if most != 1 {
		t.Errorf("at most %d learners at once, want exactly 1 (one join after the other)", most)
	}
}

// A control plane that holds etcd data passes through the etcd service's
// PreFunc on every boot (Talos services/etcd.go PreFunc: the image pull,
// then the PKI), Preparing "Running pre state" as a control plane without
// data shows it; etcd's data directory tells them apart (machined's List
// of /var/lib/etcd, what Bootstrap reads): "member" on the one, nothing on
// the other.
func TestEtcdPreparingOnEveryBoot(t *testing.T) {
	t.Parallel()

	// etcd stays Preparing for 3s after each boot: longer than gRPC's
	// reconnect backoff (1s) after a first connection the rebooting machine
	// refused, so the client sees the state even under the race detector
	f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: 50 * time.Millisecond, RebootDelay: 100 * time.Millisecond, EtcdPrepareDelay: 3 * time.Second, CRIStartDelay: 50 * time.Millisecond})
	joined(t, f, 3)

	m2 := f.Machine("cp-2")
	if err := admin(t, m2.Addr()).Reboot(ctxTimeout(t, time.Second)); err != nil {
		t.Fatalf("reboot: %v", err)
	}

	until(t, "cp-2 down", func() (bool, error) { return m2.Observe().Down, nil })
	until(t, "cp-2 back", func() (bool, error) { return !m2.Observe().Down, nil })

	c2 := admin(t, m2.Addr())
	// its API may reset the first connections while it comes up (more so
	// under the race detector): wait for an answer, well inside the 3s the
	// etcd service stays Preparing
	until(t, "cp-2's API answers", func() (bool, error) { return serviceState(t, c2, "etcd") != "", nil })
	if st, ev := serviceState(t, c2, "etcd"), lastEvent(t, c2, "etcd"); st != "Preparing" || ev != "Running pre state" {
		t.Errorf("etcd on cp-2 right after its boot: %s %q, want Preparing \"Running pre state\"", st, ev)
	}

	if got := listEtcdDir(t, c2); got != ". member" {
		t.Errorf("cp-2's /var/lib/etcd while Preparing: %q, want \". member\" (it holds data)", got)
	}

	until(t, "etcd runs on cp-2 again", func() (bool, error) { return serviceState(t, c2, "etcd") == "Running", nil })

}

func listEtcdDir(t *testing.T, c *client.Client) string {
	t.Helper()

	stream, err := c.LS(ctxTimeout(t, time.Second), &machine.ListRequest{Root: "/var/lib/etcd"})
	if err != nil {
		t.Fatalf("list: %v", err)
	}

	var names []string

	for {
		fi, err := stream.Recv()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				t.Fatalf("list: %v", err)
			}

			return strings.Join(names, " ")
		}

		names = append(names, fi.GetRelativeName())
	}
}
