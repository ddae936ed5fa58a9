package bootstrap_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/simtest"
)

// A fleet left unbootstrapped past Talos' etcd join timeout (scaled here):
// every control plane's etcd service Failed "failed to build initial etcd
// cluster: … timeout", not restarted (services/etcd.go
// buildInitialCluster). That is evidence of an empty data directory, so
// bootstrap takes cp-1 without waiting for --etcd-settle; cp-2 and cp-3
// will not join before they reboot, so the wait for etcd names them at
// once, with why and the reboot to run, instead of waiting out --wait.
// After the reboots a second run finds etcd healthy.
func TestBootstrapNamesAControlPlaneWhoseEtcdGaveUpJoining(t *testing.T) {
	f := simtest.Start(t, simtest.Options{EtcdJoinTimeout: 200 * time.Millisecond, BootTimeout: time.Hour})
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		until(t, name+"'s etcd gives up joining", func() bool { return etcdState(t, f, name) == "Failed" })
	}

	var out bytes.Buffer
	seq := newSequence(t, f, &out, t.TempDir()+"/kubeconfig")
	start := time.Now()
	err := seq.Run(context.Background())
	took := time.Since(start)
	if err == nil {
		t.Fatalf("bootstrap succeeded with cp-2 and cp-3 unable to join\n%s", out.String())
	}
	if n := f.Sim.Machine("cp-1").Calls("Bootstrap"); n != 1 {
		t.Errorf("%d Bootstrap calls on cp-1, want 1 (a failed join is an empty data directory)", n)
	}
	for _, name := range []string{"cp-2", "cp-3"} {
		want := name + ": service etcd Failed since"
		if !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "talosctl -n "+f.Inventory.Machine(name).Address+" reboot") {
			t.Errorf("the error does not name %s with the reboot to run: %v", name, err)
		}
	}
	if !strings.Contains(err.Error(), "gave up waiting to join") {
		t.Errorf("the error does not say why: %v", err)
	}
	t.Logf("refused after %s (--wait 10s):\n%v", took.Round(time.Millisecond), err)

	for _, name := range []string{"cp-2", "cp-3"} { // talosctl -n ADDR reboot
		c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine(name))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Reboot(context.Background()); err != nil {
			t.Fatalf("reboot %s: %v", name, err)
		}
		c.Close()
	}
	out.Reset()
	if err := newSequence(t, f, &out, t.TempDir()+"/kubeconfig").Run(context.Background()); err != nil {
		t.Fatalf("after the reboots: %v\n%s", err, out.String())
	}
}

func until(t *testing.T, what string, done func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !done(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
	}
}

// etcdState is the etcd service's state as the machine lists it; "" when
// it does not answer.
func etcdState(t *testing.T, f *simtest.Fleet, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := f.Dialer.Client(ctx, f.Inventory.Machine(name))
	if err != nil {
		return ""
	}
	defer c.Close()
	resp, err := c.ServiceInfo(ctx, "etcd")
	if err != nil || len(resp) == 0 {
		return ""
	}
	return resp[0].Service.GetState()
}

// A control plane with etcd data passes through Preparing on every boot
// (Talos services/etcd.go PreFunc: image pull, PKI), as one without data
// waits there. cp-1's EPHEMERAL is wiped while cp-2 and cp-3, which hold
// the cluster's data, reboot: for a while all three are Preparing. With
// --etcd-settle far shorter than that while (time alone would bootstrap
// cp-1 and split etcd), the listing of each data directory tells cp-2 and
// cp-3 from cp-1: nothing is bootstrapped, cp-1 joins once they run, and
// the fleet keeps one etcd cluster.
func TestBootstrapTellsDataFromEmptyByEvidence(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true, EtcdPrepareDelay: 4 * time.Second})
	ctx := context.Background()
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		c, err := f.Dialer.Client(ctx, f.Inventory.Machine(name))
		if err != nil {
			t.Fatal(err)
		}
		if name == "cp-1" {
			err = c.ResetGeneric(ctx, &machine.ResetRequest{Reboot: true, SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}})
		} else {
			err = c.Reboot(ctx)
		}
		c.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		m := f.Sim.Machine(name)
		until(t, name+" down", func() bool { return m.Observe().Down })
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		until(t, name+"'s etcd Preparing", func() bool { return etcdState(t, f, name) == "Preparing" })
	}

	var out bytes.Buffer
	seq := bootstrap.New(bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: t.TempDir() + "/kubeconfig",
		SkipNodes: true, Timeout: 5 * time.Second, Wait: 20 * time.Second, Poll: 50 * time.Millisecond, EtcdSettle: time.Millisecond, Out: &out,
	})
	if err := seq.Run(ctx); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	if cs := f.Sim.EtcdClusters(); len(cs) != 1 || len(cs[0].Members) != 3 {
		t.Errorf("etcd after the run: %+v, want one cluster of three (no split)", cs)
	}
	for _, want := range []string{"holds member: etcd is starting on its data", "nothing to bootstrap"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "bootstrapping cp-1") {
		t.Errorf("cp-1 was bootstrapped while cp-2 and cp-3 held data:\n%s", out.String())
	}
}
