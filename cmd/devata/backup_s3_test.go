package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// s3Env points the AWS SDK's standard environment at srv, as an operator
// would for the aws CLI, and keeps the machine's own AWS files out.
func s3Env(t *testing.T, srv *testenv.S3) {
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	t.Setenv("AWS_ENDPOINT_URL", "")
	t.Setenv("AWS_REGION", "")
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// Issue 34 item 1 on the sim and a real S3 server (versitygw): backup etcd
// -o s3://bucket/prefix/ twice, list, verify --latest (a real etcd serves
// the restored revision), prune --yes keeping what the policy says; a
// wrong secret key, a missing bucket and an endpoint that is down are
// refused with exit 2 and leave nothing; an object tampered with after its
// upload fails verify; no temporary copy stays behind and no credential
// reaches an output.
func TestBackupS3(t *testing.T) {
	fixture := kubeSnapshot(t)
	srv := testenv.StartS3(t)
	sf := startSim(t, simtest.Options{Bootstrap: true})
	for _, m := range sf.Sim.Machines() {
		if strings.HasPrefix(m.Name(), "cp-") {
			m.SetFaults(sim.Faults{EtcdSnapshotData: fixture})
		}
	}
	s3Env(t, srv)
	tmp := t.TempDir() // the private copies before upload and verify's work go here
	t.Setenv("TMPDIR", tmp)
	noLeftovers := func(after string) {
		t.Helper()
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("after %s, %s holds %v: the temporary copy must go", after, tmp, entries)
		}
	}
	prefix := filepath.Join(srv.Dir, srv.Bucket, "homelab")
	objects := func() []string {
		t.Helper()
		entries, _ := os.ReadDir(prefix)
		var names []string
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				names = append(names, e.Name())
			}
		}
		return names
	}
	url := "s3://" + srv.Bucket + "/homelab/"
	var all strings.Builder
	run := func(args ...string) result {
		t.Helper()
		r := devata(t, nil, append(args, "--config", sf.settings)...)
		show(t, r)
		all.WriteString(r.stdout + r.err)
		return r
	}

	for i := range 2 {
		r := run("backup", "etcd", "--to", url)
		if r.code != 0 {
			t.Fatalf("backup %d: exit %d\n%s%s", i, r.code, r.stdout, r.err)
		}
		lacks(t, "backup's stdout", r.stdout, "written to "+url+"etcd-homelab-", "sidecar written to "+url+"etcd-homelab-")
		noLeftovers("backup etcd")
		time.Sleep(1100 * time.Millisecond) // the name has the second
	}
	l := listDir(t, sf, url)
	if len(l.Snapshots) != 2 || l.Snapshots[0].Verified != nil || l.Snapshots[0].Revision == 0 {
		t.Fatalf("list after two backups: %+v", l)
	}
	if got := objects(); len(got) != 4 {
		t.Errorf("the bucket holds %v, want two snapshots and their sidecars", got)
	}
	newest, older, rev := l.Snapshots[0].Name, l.Snapshots[1].Name, l.Snapshots[0].Revision

	r := run("backup", "verify", "--latest", url)
	if r.code != 0 {
		t.Fatalf("verify --latest: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "verify's stdout", r.stdout, url+newest+" restores: etcd 3.7.1 served revision", "(the sidecar's)", "3 nodes", "proof recorded in "+url+newest+".json")
	noLeftovers("backup verify")
	l = listDir(t, sf, url)
	if v := l.Snapshots[0].Verified; v == nil || v.Result != "restored" || v.Revision != rev {
		t.Errorf("the proof in the list: %+v, want restored at revision %d", v, rev)
	}

	r = run("backup", "prune", url, "--keep-last", "1", "--yes")
	if r.code != 0 {
		t.Fatalf("prune --yes: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "prune's stdout", r.stdout, "keep   "+newest, "deleted "+older, "deleted 1 of 2")
	if got := objects(); len(got) != 2 || got[0] != newest || got[1] != newest+".json" {
		t.Errorf("after prune the bucket holds %v, want %s and its sidecar", got, newest)
	}

	// refused: nothing is backed up, nothing new is visible, no secret shows
	before := strings.Join(objects(), " ")
	for what, c := range map[string]struct {
		env  [2]string
		out  string
		want string
	}{
		"wrong secret key": {[2]string{"AWS_SECRET_ACCESS_KEY", "wrong-secret-key-0c1d9"}, url, "access denied"},
		"missing bucket":   {[2]string{}, "s3://no-such-bucket/homelab/", "bucket not found"},
		"endpoint down":    {[2]string{"AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1"}, url, "endpoint unreachable"},
	} {
		t.Run(what, func(t *testing.T) {
			if c.env[0] != "" {
				t.Setenv(c.env[0], c.env[1])
			}
			r := run("backup", "etcd", "--to", c.out)
			if r.code != 2 || !strings.Contains(r.err, c.want) || !strings.Contains(r.err, "nothing was backed up") {
				t.Errorf("exit %d, want 2 with %q and nothing was backed up\n%s", r.code, c.want, r.err)
			}
			if strings.Contains(r.stdout+r.err, "wrong-secret-key-0c1d9") {
				t.Error("the secret key is in an output")
			}
			if got := strings.Join(objects(), " "); got != before {
				t.Errorf("the bucket holds %s, held %s", got, before)
			}
			noLeftovers(what)
		})
	}
	// usage errors, before anything is asked of S3 or a machine
	for _, args := range [][]string{
		{"backup", "etcd", "--to", url, "--keep-last", "1"}, {"backup", "etcd", "--to", url, "--prune"},
		{"backup", "etcd", "--to", url + "x.db", "--prune", "--keep-last", "1"}, {"backup", "verify", url},
	} {
		if r := run(args...); r.code != 64 {
			t.Errorf("devata %s: exit %d, want 64\n%s", strings.Join(args, " "), r.code, r.err)
		}
	}
	if got := strings.Join(objects(), " "); got != before {
		t.Errorf("after usage errors the bucket holds %s, held %s", got, before)
	}
	if _, err := os.Stat(filepath.Join(srv.Dir, "no-such-bucket")); err == nil {
		t.Error("a backup to a missing bucket created it")
	}

	// an object named in -o, then tampered with after its upload: same
	// size, one byte changed behind the store's back
	r = run("backup", "etcd", "--to", url+"named.db")
	if r.code != 0 {
		t.Fatalf("backup -o %snamed.db: exit %d\n%s", url, r.code, r.err)
	}
	if r := run("backup", "etcd", "--to", url+"named.db"); r.code != 2 || !strings.Contains(r.err, "--force") {
		t.Errorf("a second backup to the same object: exit %d, want 2 and --force\n%s", r.code, r.err)
	}
	obj := filepath.Join(prefix, "named.db")
	data, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	if err := os.WriteFile(obj, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r = run("backup", "verify", url+"named.db")
	if r.code != 2 || !strings.Contains(r.err, "it changed since backup etcd wrote it") || !strings.Contains(r.err, "do not rely on "+url+"named.db") {
		t.Errorf("verify of a tampered object: exit %d, want 2\n%s", r.code, r.err)
	}
	noLeftovers("verify of a tampered object")

	// one scheduled run to S3: back up, prove, prune (the tampered object,
	// recorded failed, and the older proven one go)
	time.Sleep(1100 * time.Millisecond) // sidecar times have the second
	r = run("backup", "etcd", "--to", url, "--verify", "--prune", "--keep-last", "1")
	if r.code != 0 {
		t.Fatalf("backup --verify --prune: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "the scheduled run's stdout", r.stdout, "restores: etcd 3.7.1", "deleted "+newest, "deleted named.db", "deleted 2 of 3")
	if l := listDir(t, sf, url); len(l.Snapshots) != 1 || l.Snapshots[0].Verified == nil || l.Snapshots[0].Verified.Result != "restored" {
		t.Errorf("after the scheduled run: %+v; want the new snapshot alone, proven", l)
	}
	if got := objects(); len(got) != 2 {
		t.Errorf("after the scheduled run the bucket holds %v, want one snapshot and its sidecar", got)
	}
	noLeftovers("the scheduled run")

	// file:///dir/ goes the same way, the directory created as for -o DIR/
	fileDir := filepath.Join(t.TempDir(), "fresh")
	fileURL := "file://" + fileDir + "/"
	if r := run("backup", "etcd", "--to", fileURL); r.code != 0 || !strings.Contains(r.stdout, "written to "+fileURL+"etcd-homelab-") {
		t.Fatalf("backup -o %s: exit %d\n%s%s", fileURL, r.code, r.stdout, r.err)
	}
	if l := listDir(t, sf, fileURL); len(l.Snapshots) != 1 {
		t.Errorf("list %s: %+v, want the one snapshot", fileURL, l)
	} else if fi, err := os.Stat(filepath.Join(fileDir, l.Snapshots[0].Name)); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the snapshot in %s: %v, %v; want a 0600 file", fileDir, fi, err)
	}
	noLeftovers("backup etcd -o " + fileURL)

	for _, secret := range []string{srv.SecretKey, kubeSecretValue} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("a secret is in an output: %.6s…", secret)
		}
	}
}
