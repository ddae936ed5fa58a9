package bootstrap_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// beatFast lowers heartbeat.Every for one test (no test here runs in
// parallel, and no wait runs between tests).
func beatFast(t *testing.T) {
	old := heartbeat.Every
	heartbeat.Every = 30 * time.Millisecond
	t.Cleanup(func() { heartbeat.Every = old })
}

func mustMatch(t *testing.T, out string, res ...string) {
	t.Helper()
	for _, re := range res {
		if !regexp.MustCompile(`(?m)^` + re + `$`).MatchString(out) {
			t.Errorf("no line matching\n  %s\nin:\n%s", re, out)
		}
	}
}

// Every wait of a build from maintenance mode beats: a machine coming back
// on mTLS (held unreachable for a moment after its apply), etcd's wait for
// a bootstrap holding, and the control planes joining etcd.
func TestBootstrapWaitsSayTheyStillWait(t *testing.T) {
	beatFast(t)
	f := simtest.Start(t, simtest.Options{Maintenance: []string{"cp-1", "cp-2", "cp-3", "worker-1", "worker-2"}, EtcdJoinDelay: 500 * time.Millisecond})
	w := f.Sim.Machine("worker-2")
	out := &simtest.Output{On: "worker-2: config applied over the maintenance connection", Then: func() {
		w.SetFaults(sim.Faults{Unreachable: true})
		time.AfterFunc(300*time.Millisecond, func() { w.SetFaults(sim.Faults{}) })
	}}
	seq := bootstrap.New(bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: t.TempDir() + "/kubeconfig",
		SkipNodes: true, Timeout: 2 * time.Second, Wait: 10 * time.Second, Poll: 20 * time.Millisecond, EtcdSettle: 300 * time.Millisecond, Out: out,
	})
	if err := seq.Run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	mustMatch(t, out.String(),
		`    waiting for worker-2 to answer on mTLS and run its desired config: \d+ms of 10s \(last: .+\)`,
		`    waiting for etcd's wait to be bootstrapped to hold for 300ms on every control plane: \d+ms of 10s \(last: not held long enough yet: cp-1.*\)`,
		`    waiting for etcd to be healthy with members \[cp-1 cp-2 cp-3\]: \d+ms of 10s \(last: .+\)`,
	)
	// A wait that is over says nothing more: no heartbeat after its verdict.
	if i, j := strings.Index(out.String(), "worker-2: answers on mTLS"), strings.LastIndex(out.String(), "waiting for worker-2 to answer"); i < 0 || j > i {
		t.Errorf("a heartbeat for worker-2 follows the line saying it answers:\n%s", out.String())
	}
}

// The Nodes' wait beats too, naming the kubeconfig it reads them through.
func TestWaitForNodesSaysItStillWaits(t *testing.T) {
	beatFast(t)
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	kubeconfig := filepath.Join(t.TempDir(), "nowhere.kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- cluster: {server: 'https://127.0.0.1:1', insecure-skip-tls-verify: true}\n  name: c\ncontexts:\n- context: {cluster: c, user: u}\n  name: c\ncurrent-context: c\nusers:\n- name: u\n  user: {token: x}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := &simtest.Output{}
	seq := bootstrap.New(bootstrap.Options{
		InventoryPath: f.Inventory.Path, Talosconfig: f.Talosconfig(t), Overrides: f.Overrides, KubeconfigOut: t.TempDir() + "/kubeconfig",
		Kubeconfig: kubeconfig, Timeout: 2 * time.Second, Wait: time.Second, Poll: 20 * time.Millisecond, EtcdSettle: 100 * time.Millisecond, Out: out,
	})
	err := seq.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "nodes not Ready within 1s") {
		t.Fatalf("err = %v, want the Nodes' wait to time out\n%s", err, out.String())
	}
	mustMatch(t, out.String(), `    waiting for every Node to register and be Ready \(kubeconfig `+regexp.QuoteMeta(kubeconfig)+`\): \d+ms of 1s \(last: .+\)`)
}
