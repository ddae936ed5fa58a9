package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// Issue 34's acceptance, item 5, on the sim and a real S3 server
// (versitygw): backup etcd --to s3://…/ (a real etcd's snapshot of a real
// Kubernetes, streamed through the sim's EtcdSnapshotData), backup verify
// --latest, then every control plane's EPHEMERAL wiped as talosctl reset
// --system-labels-to-wipe EPHEMERAL sends it, plan --recover-from
// s3://…/latest naming the snapshot from its sidecar alone, and bootstrap
// --recover-from s3://…/latest rebuilding one etcd of three at the
// snapshot's revision or later. Before that, a tampered object, a missing
// bucket, an endpoint that is down and a destination without a snapshot
// name are each refused with no Bootstrap and no EtcdRecover sent to any
// machine; no private copy stays behind and no secret reaches an output.
func TestBootstrapRecoverFromS3(t *testing.T) {
	fixture := kubeSnapshot(t)
	srv := testenv.StartS3(t)
	sf := startSim(t, simtest.Options{Bootstrap: true})
	for _, m := range sf.Sim.Machines() {
		if strings.HasPrefix(m.Name(), "cp-") {
			m.SetFaults(sim.Faults{EtcdSnapshotData: fixture})
		}
	}
	s3Env(t, srv)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	noLeftovers := func(after string) {
		t.Helper()
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("after %s, %s holds %v: the private copy must go", after, tmp, entries)
		}
	}
	url := "s3://" + srv.Bucket + "/homelab/"
	var all strings.Builder
	run := func(args ...string) result {
		t.Helper()
		r := devata(t, nil, args...)
		show(t, r)
		all.WriteString(r.stdout + r.err)
		return r
	}

	if r := run("backup", "etcd", "--config", sf.settings, "--to", url); r.code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := run("backup", "verify", "--config", sf.settings, "--latest", url); r.code != 0 {
		t.Fatalf("verify --latest: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	l := listDir(t, sf, url)
	if len(l.Snapshots) != 1 || l.Snapshots[0].Verified == nil || l.Snapshots[0].Revision == 0 {
		t.Fatalf("list: %+v, want one proven snapshot", l)
	}
	name, rev := l.Snapshots[0].Name, l.Snapshots[0].Revision

	// every control plane's EPHEMERAL wiped: configured, etcd gone
	ctx := context.Background()
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		c, err := sf.Dialer.Client(ctx, sf.Inventory.Machine(cp))
		if err != nil {
			t.Fatal(err)
		}
		err = c.ResetGeneric(ctx, &machine.ResetRequest{Reboot: true, Graceful: false,
			SystemPartitionsToWipe: []*machine.ResetPartitionSpec{{Label: "EPHEMERAL", Wipe: true}}})
		c.Close()
		if err != nil {
			t.Fatalf("reset %s: %v", cp, err)
		}
		m := sf.Sim.Machine(cp)
		for deadline := time.Now().Add(20 * time.Second); !m.Observe().Down; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s did not go down for its reset", cp)
			}
		}
	}
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		m := sf.Sim.Machine(cp)
		answers := func() bool {
			vctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			c, err := sf.Dialer.Client(vctx, sf.Inventory.Machine(cp))
			if err != nil {
				return false
			}
			defer c.Close()
			_, err = c.Version(vctx)
			return err == nil
		}
		for deadline := time.Now().Add(20 * time.Second); m.Observe().Down || !m.Configured() || !answers(); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not back, configured and answering, after its reset", cp)
			}
		}
	}
	if cs := sf.Sim.EtcdClusters(); len(cs) != 0 {
		t.Fatalf("etcd after wiping every control plane's EPHEMERAL: %+v", cs)
	}
	sent := func() (n int) {
		for _, m := range sf.Sim.Machines() {
			n += m.Calls("Bootstrap") + m.Calls("EtcdRecover")
		}
		return n
	}
	before := sent()

	// the runbook, from the sidecar alone, in each format
	r := run("plan", "-o", "markdown", "--config", sf.settings, "--skip-nodes", "--recover-from", url+"latest")
	if r.code != 1 {
		t.Errorf("plan -o markdown: exit %d, want 1 (pending)\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "the markdown plan", r.stdout, "## The snapshot", "- Object: `"+url+name+"`", "- Cluster: homelab; taken ",
		"etcd revision: "+itoa64(rev)+"; members: cp-1, cp-2, cp-3", "- Last proof of restore: restored ",
		"from the snapshot "+url+name, "aws s3 cp "+url+name+" ./"+name, "sha256sum -c", "--recover-from=./"+name, "— pending")
	r = run("plan", "-o", "text", "--config", sf.settings, "--skip-nodes", "--recover-from", url+"latest")
	lacks(t, "the text plan", r.stdout, "recover from "+url+name+": cluster homelab, taken ", "etcd revision "+itoa64(rev), "last proof of restore: restored ")
	r = run("plan", "-o", "json", "--config", sf.settings, "--skip-nodes", "--recover-from", url+name)
	var pj struct {
		RecoverFrom *struct {
			URL      string   `json:"url"`
			Revision int64    `json:"revision"`
			Members  []string `json:"members"`
			Verified *struct {
				Result string `json:"result"`
			} `json:"verified"`
		} `json:"recoverFrom"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &pj); err != nil || pj.RecoverFrom == nil || pj.RecoverFrom.URL != url+name || pj.RecoverFrom.Revision != rev ||
		len(pj.RecoverFrom.Members) != 3 || pj.RecoverFrom.Verified == nil || pj.RecoverFrom.Verified.Result != "restored" {
		t.Errorf("plan -o json's recoverFrom: %+v, %v\n%s", pj.RecoverFrom, err, r.stdout)
	}
	noLeftovers("plan")

	// refused before any machine is asked
	obj := filepath.Join(srv.Dir, srv.Bucket, "homelab", name)
	good, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	bad[len(bad)/2] ^= 0xff
	for _, c := range []struct {
		what, from string
		env        [2]string
		tamper     bool
		code       int
		want       string
	}{
		{what: "tampered object", from: url + "latest", tamper: true, code: 2, want: "it changed since backup etcd wrote it"},
		{what: "missing bucket", from: "s3://no-such-bucket/homelab/latest", code: 2, want: "bucket not found"},
		{what: "endpoint down", from: url + "latest", env: [2]string{"AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1"}, code: 2, want: "endpoint unreachable"},
		{what: "wrong secret key", from: url + "latest", env: [2]string{"AWS_SECRET_ACCESS_KEY", "wrong-secret-key-7a2e1"}, code: 2, want: "access denied"},
		{what: "no such snapshot", from: url + "etcd-homelab-20200101T000000Z.db", code: 2, want: "holds no snapshot etcd-homelab-20200101T000000Z.db"},
		{what: "a destination, not a snapshot", from: url, code: 64, want: "end it with /latest"},
	} {
		t.Run(c.what, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			if c.tamper {
				if err := os.WriteFile(obj, bad, 0o600); err != nil {
					t.Fatal(err)
				}
				defer os.WriteFile(obj, good, 0o600) //nolint:errcheck // checked by the recovery below
			}
			r := run(bootstrapArgs(sf, nil, "--recover-from", c.from)...)
			if r.code != c.code || !strings.Contains(r.err, c.want) {
				t.Errorf("exit %d, want %d with %q\n%s%s", r.code, c.code, c.want, r.stdout, r.err)
			}
			if c.code == 2 && !strings.Contains(r.err, "nothing was sent to any machine") {
				t.Errorf("the refusal does not say nothing was sent:\n%s", r.err)
			}
			if n := sent(); n != before {
				t.Errorf("%d Bootstrap or EtcdRecover calls were sent for a refused recovery", n-before)
			}
			noLeftovers(c.what)
		})
	}

	r = run(bootstrapArgs(sf, nil, "--recover-from", url+"latest")...)
	if r.code != 0 {
		t.Fatalf("bootstrap --recover-from %slatest: exit %d\n%s%s", url, r.code, r.stdout, r.err)
	}
	lacks(t, "bootstrap's stderr", r.err, "fetched "+url+name+" (", "last proof of restore: restored ")
	lacks(t, "bootstrap's stdout", r.stdout, "recovering etcd on cp-1, the first control plane by name, from "+url+name+" (revision "+itoa64(rev), "recovered etcd on cp-1 from "+url+name)
	cs := sf.Sim.EtcdClusters()
	if len(cs) != 1 || len(cs[0].Members) != 3 || cs[0].Revision < rev {
		t.Errorf("etcd after the recovery: %+v, want one cluster of three at revision %d or later", cs, rev)
	}
	noLeftovers("bootstrap --recover-from")
	for _, secret := range []string{srv.SecretKey, kubeSecretValue, "wrong-secret-key-7a2e1"} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("a secret is in an output: %.6s…", secret)
		}
	}
}

func itoa64(n int64) string { return strconv.FormatInt(n, 10) }

// bootstrap --recover-from file:///DIR/NAME and plan --recover-from
// file:///DIR/latest: the same path as s3:// through a directory, with the
// sim's own snapshot; the plan's hand commands copy and check it.
func TestBootstrapRecoverFromFileURL(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	dir := t.TempDir()
	url := "file://" + dir + "/"
	if r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", url); r.code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	l := listDir(t, sf, url)
	if len(l.Snapshots) != 1 {
		t.Fatalf("list: %+v", l)
	}
	name := l.Snapshots[0].Name
	before := sf.Sim.EtcdClusters()[0].Revision
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		sf.Sim.Machine(cp).Wipe()
	}
	for _, cp := range []string{"cp-1", "cp-2", "cp-3"} {
		m := sf.Sim.Machine(cp)
		for deadline := time.Now().Add(20 * time.Second); m.Configured() || m.Observe().Down; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not back in maintenance mode", cp)
			}
		}
	}
	r := devata(t, nil, "plan", "-o", "markdown", "--config", sf.settings, "--skip-nodes", "--recover-from", url+"latest")
	show(t, r)
	lacks(t, "the plan", r.stdout, "- Object: `"+url+name+"`", "- Last proof of restore: never", "cp "+dir+"/"+name+" "+dir+"/"+name+".json .", "--recover-from=./"+name)
	r = devata(t, nil, bootstrapArgs(sf, nil, "--recover-from", url+name)...)
	show(t, r)
	if r.code != 0 || !strings.Contains(r.stdout, "recovered etcd on cp-1 from "+url+name) {
		t.Fatalf("bootstrap --recover-from %s%s: exit %d\n%s%s", url, name, r.code, r.stdout, r.err)
	}
	if cs := sf.Sim.EtcdClusters(); len(cs) != 1 || len(cs[0].Members) != 3 || cs[0].Revision < before {
		t.Errorf("etcd after the recovery: %+v, want one cluster of three at revision %d or later", cs, before)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%s holds %v after the recovery, want the snapshot and its sidecar as they were", dir, entries)
	}
}
