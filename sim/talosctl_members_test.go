//go:build talosctl

package sim_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// The real talosctl v1.11.0 against the sim's etcd membership and reset
// (cmd/talosctl/cmd/talos/etcd.go, reset.go): `etcd members` lists what
// the sim's etcd holds, `etcd remove-member` by hex ID takes out a member
// that is down (and etcd refuses one that would cost quorum), `etcd leave`
// on a member removes it, `reset --wait=false` is acked and the machine
// comes back with its etcd data gone. The recovery from the snapshot is
// talosctl_recover_test.go.
func TestTalosctlEtcdMembership(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	bin, tcPath := realTalosctl(t, f, "cp-1", "cp-1")
	dir := t.TempDir()
	run := func(args ...string) (string, error) { return talosctlErr(bin, tcPath, args...) }

	out, err := run("etcd", "members")
	if err != nil || strings.Count(out, "https://") < 3 {
		t.Fatalf("etcd members: %v\n%s", err, out)
	}
	c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	ids := memberIDs(t, c)
	c.Close()

	// etcd refuses to lose a healthy member while another is down
	f.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	out, err = run("etcd", "remove-member", fmt.Sprintf("%x", ids["cp-2"]))
	if err == nil || !strings.Contains(out, "unhealthy cluster") {
		t.Errorf("remove-member cp-2 while cp-3 is down: %v, want etcd's refusal\n%s", err, out)
	}
	if out, err = run("etcd", "remove-member", fmt.Sprintf("%x", ids["cp-3"])); err != nil {
		t.Fatalf("remove-member cp-3 (down): %v\n%s", err, out)
	}
	out, err = run("etcd", "members")
	if err != nil || strings.Contains(out, "cp-3") || !strings.Contains(out, "cp-2") {
		t.Errorf("etcd members after removing cp-3: %v\n%s", err, out)
	}

	if out, err = run("-n", "cp-2", "etcd", "leave"); err != nil {
		t.Fatalf("etcd leave on cp-2: %v\n%s", err, out)
	}
	out, err = run("etcd", "members")
	if err != nil || strings.Contains(out, "cp-2") || !strings.Contains(out, "cp-1") {
		t.Errorf("etcd members after cp-2 left: %v\n%s", err, out)
	}

	snap := filepath.Join(dir, "db.snapshot")
	if out, err = run("etcd", "snapshot", snap); err != nil {
		t.Fatalf("etcd snapshot: %v\n%s", err, out)
	}

	// cp-1, the last member, wiped without leaving: etcd is gone
	if out, err = run("reset", "--graceful=false", "--reboot", "--system-labels-to-wipe", "EPHEMERAL", "--wait=false"); err != nil {
		t.Fatalf("reset cp-1: %v\n%s", err, out)
	}
	m := f.Sim.Machine("cp-1")
	deadline := time.Now().Add(20 * time.Second)
	for len(f.Sim.EtcdClusters()) != 0 || m.Observe().Down || !m.Configured() {
		if time.Now().After(deadline) {
			t.Fatalf("cp-1 after the EPHEMERAL wipe: clusters %+v, configured %t", f.Sim.EtcdClusters(), m.Configured())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
