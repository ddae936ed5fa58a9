package sequence_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

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
