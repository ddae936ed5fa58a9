//go:build talosctl

package sim_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
)

// The real talosctl v1.11.0 recovers etcd on the sim from its own snapshot
// (cmd/talosctl/cmd/talos/bootstrap.go: etcdutl's Status of the file,
// machinery's Client.EtcdRecover upload in 4 KiB messages, then Bootstrap
// with recover_etcd), after every control plane lost its system disk and
// came back configured by `apply-config --insecure`. talosctl sends
// `nodes`, so the upload's reply is apid's one-to-many unary one: a failed
// node is an error in the reply's messages, which talosctl prints as "1
// error occurred: * <node>: …" (a worker; a control plane whose /var is
// not mounted yet, retried here as a user would). The restored cluster
// holds the snapshot's revision under new member IDs.
func TestTalosctlEtcdRecover(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	bin, tcPath := realTalosctl(t, f, "cp-1", "cp-1")
	dir := t.TempDir()
	run := func(args ...string) (string, error) { return talosctlErr(bin, tcPath, args...) }
	cps := []string{"cp-1", "cp-2", "cp-3"}

	snap := filepath.Join(dir, "db.snapshot")
	out, err := run("etcd", "snapshot", snap)
	if err != nil {
		t.Fatalf("etcd snapshot: %v\n%s", err, out)
	}
	rev := revisionIn(t, "etcd snapshot", out)
	c, err := f.Dialer.Client(context.Background(), f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	oldIDs := memberIDs(t, c)
	c.Close()

	out, err = run("-n", "worker-1", "bootstrap", "--recover-from", snap)
	if err == nil || !strings.Contains(out, "error uploading snapshot: 1 error occurred") ||
		!strings.Contains(out, "worker-1: rpc error: code = Unimplemented desc = etcd recover is only available on control plane nodes") {
		t.Errorf("bootstrap --recover-from on a worker: %v, want apid's node error\n%s", err, out)
	}

	// every control plane loses its system disk: maintenance mode, no etcd
	for _, n := range cps {
		f.Sim.Machine(n).Wipe()
	}
	for _, n := range cps {
		m := f.Sim.Machine(n)
		for deadline := time.Now().Add(20 * time.Second); m.Configured() || m.Observe().Down; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not in maintenance mode after its wipe", n)
			}
		}
	}
	if cs := f.Sim.EtcdClusters(); len(cs) != 0 {
		t.Fatalf("etcd after every control plane was wiped: %+v, want none", cs)
	}
	for _, n := range cps {
		cfg := filepath.Join(dir, n+".yaml")
		if err := os.WriteFile(cfg, f.Desired[n], 0o600); err != nil {
			t.Fatal(err)
		}
		addr := f.Overrides[n]
		if out, err := run("apply-config", "--insecure", "-n", addr, "-e", addr, "-f", cfg); err != nil {
			t.Fatalf("apply-config --insecure %s: %v\n%s", n, err, out)
		}
	}
	for _, n := range cps {
		m := f.Sim.Machine(n)
		for deadline := time.Now().Add(20 * time.Second); !m.Configured() || m.Observe().Down; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not configured after apply-config --insecure", n)
			}
		}
	}

	// right after the boot the node is not ready for it yet: try again
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		out, err = run("bootstrap", "--recover-from", snap)
		if err == nil {
			break
		}
		if time.Now().After(deadline) || !strings.Contains(out, "cp-1: rpc error: code = FailedPrecondition desc = etcd service is not ready for recovery yet") {
			t.Fatalf("bootstrap --recover-from: %v\n%s", err, out)
		}
		t.Logf("bootstrap --recover-from, not yet:\n%s", out)
	}
	if got := revisionIn(t, "bootstrap --recover-from", out); got != rev {
		t.Errorf("talosctl read revision %d in the snapshot, etcd snapshot saved %d", got, rev)
	}

	var members string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		members, err = run("etcd", "members")
		if err == nil && strings.Contains(members, "cp-2") && strings.Contains(members, "cp-3") && !strings.Contains(members, "true") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcd members after the recovery: %v\n%s", err, members)
		}
	}
	cs := f.Sim.EtcdClusters()
	if len(cs) != 1 || len(cs[0].Members) != 3 || cs[0].Revision < rev {
		t.Errorf("etcd after the recovery: %+v, want one cluster of three at revision %d or later", cs, rev)
	}
	c, err = f.Dialer.Client(context.Background(), f.Inventory.Machine("cp-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	newIDs := memberIDs(t, c)
	for _, n := range cps {
		if id, ok := newIDs[n]; !ok || id == oldIDs[n] {
			t.Errorf("%s: member ID %x (present %t), was %x: a restored cluster has new members", n, id, ok, oldIDs[n])
		}
	}

	after := filepath.Join(dir, "after.snapshot")
	if out, err = run("etcd", "snapshot", after); err != nil {
		t.Fatalf("etcd snapshot after the recovery: %v\n%s", err, out)
	}
	if got := revisionIn(t, "etcd snapshot after the recovery", out); got < rev {
		t.Errorf("snapshot after the recovery at revision %d, before it %d", got, rev)
	}
}

var revisionRE = regexp.MustCompile(`revision (\d+)`)

// revisionIn reads the revision talosctl reports from etcdutl's snapshot
// Status.
func revisionIn(t *testing.T, what, out string) int64 {
	t.Helper()
	m := revisionRE.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s reports no revision:\n%s", what, out)
	}
	rev, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return rev
}
