package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"filippo.io/age"

	"devata.dev/devata/backup"
	"devata.dev/devata/config"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
)

// privateTmp points TMPDIR at a fresh directory, where the clear copies
// before encryption and after decryption go, and returns a check that
// it is empty again.
func privateTmp(t *testing.T) func(after string) {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	return func(after string) {
		t.Helper()
		if entries, _ := os.ReadDir(tmp); len(entries) != 0 {
			t.Errorf("after %s, %s holds %v: no clear copy may stay behind", after, tmp, entries)
		}
	}
}

func readSidecar(t *testing.T, path string) backup.Sidecar {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s backup.Sidecar
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

func sha(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Issue 34 item 2 on the sim, to a file: backup etcd --encrypt-to (twice)
// stores only ciphertext (age's, no Secret of the snapshot in it) with a
// sidecar in clear that names the recipients and both hashes, and leaves
// no clear copy in $TMPDIR; list shows it encrypted; verify without an
// identity and with a wrong one is refused (exit 2, naming the recipients
// and --age-identity, nothing recorded), with the right one proves the
// restore; a tampered ciphertext fails and is recorded failed; no identity
// reaches an output.
func TestBackupEncryptedFile(t *testing.T) {
	fixture := kubeSnapshot(t)
	if !bytes.Contains(fixture, []byte(kubeSecretValue)) {
		t.Fatal("the fixture holds the Secret's value nowhere in clear: the checks below would prove nothing")
	}
	sf := startSim(t, simtest.Options{Bootstrap: true})
	for _, m := range sf.Sim.Machines() {
		if strings.HasPrefix(m.Name(), "cp-") {
			m.SetFaults(sim.Faults{EtcdSnapshotData: fixture})
		}
	}
	keys := t.TempDir()
	right, rightFile := ageKeyFile(t, keys, "right.txt")
	other, _ := ageKeyFile(t, keys, "other.txt")
	wrong, wrongFile := ageKeyFile(t, keys, "wrong.txt")
	noLeftovers := privateTmp(t)
	var all strings.Builder
	run := func(args ...string) result {
		t.Helper()
		r := devata(t, nil, append(args, "--config", sf.settings)...)
		show(t, r)
		all.WriteString(r.stdout + r.err)
		return r
	}
	dir := filepath.Join(t.TempDir(), "backups") + "/"
	snap := dir + "etcd.db"
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	r := run("backup", "etcd", "--to", snap, "--encrypt-to", right.Recipient().String(), "--encrypt-to", other.Recipient().String())
	if r.code != 0 {
		t.Fatalf("backup --encrypt-to: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "backup's stdout", r.stdout, "age-encrypted to "+right.Recipient().String()+", "+other.Recipient().String(), "in clear "+itoa(len(fixture))+" bytes, sha256 "+sha(fixture))
	noLeftovers("backup etcd --encrypt-to")
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		t.Errorf("%s holds %v, want the snapshot and its sidecar alone", dir, entries)
	}
	stored, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(stored, []byte("age-encryption.org/v1\n")) || bytes.Contains(stored, []byte(kubeSecretValue)) || bytes.Contains(stored, fixture[:4096]) {
		t.Errorf("%s is not age ciphertext alone", snap)
	}
	if fi, _ := os.Stat(snap); fi == nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("%s: %v, want mode 0600", snap, fi)
	}
	side := readSidecar(t, snap+".json")
	enc := side.Encryption
	if enc == nil || enc.Format != "age" || strings.Join(enc.Recipients, " ") != right.Recipient().String()+" "+other.Recipient().String() ||
		enc.PlaintextSize != int64(len(fixture)) || enc.PlaintextSHA256 != sha(fixture) || side.Size != int64(len(stored)) || side.SHA256 != sha(stored) || side.EtcdRevision == 0 {
		t.Errorf("the sidecar: %+v, encryption %+v; want the stored size and hash, age, both recipients, the clear size and hash", side, enc)
	}

	l := listDir(t, sf, dir)
	r = run("backup", "list", dir)
	lacks(t, "list's table", r.stdout, "ENCRYPTED", "age (2 recipients)")
	r = run("backup", "list", dir, "-o", "json")
	lacks(t, "list's JSON", r.stdout, `"encrypted": true`, `"recipients": [`, `"plaintextSha256": "`+sha(fixture))
	if len(l.Snapshots) != 1 {
		t.Fatalf("list: %+v", l)
	}

	sideBefore, _ := os.ReadFile(snap + ".json")
	for what, c := range map[string]struct {
		args []string
		want string
	}{
		"no identity":    {nil, "none is given"},
		"wrong identity": {[]string{"--age-identity", wrongFile}, "it does not open with the 1 age identity from age identity file " + wrongFile},
	} {
		r := run(append([]string{"backup", "verify", snap}, c.args...)...)
		if r.code != 2 {
			t.Errorf("verify with %s: exit %d, want 2\n%s", what, r.code, r.err)
		}
		lacks(t, "verify with "+what, r.err, c.want, "is age-encrypted to "+right.Recipient().String()+", "+other.Recipient().String(), "pass --age-identity FILE")
		if after, _ := os.ReadFile(snap + ".json"); !bytes.Equal(after, sideBefore) {
			t.Errorf("verify with %s changed the sidecar: a missing key is no proof either way", what)
		}
		noLeftovers("verify with " + what)
	}

	r = run("backup", "verify", snap, "--age-identity", rightFile)
	if r.code != 0 {
		t.Fatalf("verify with the right identity: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "verify's stdout", r.stdout, snap+" restores: etcd 3.7.1 served revision", "3 nodes")
	noLeftovers("verify")
	if v := readSidecar(t, snap+".json").Verified; v == nil || v.Result != "restored" || v.Revision != side.EtcdRevision {
		t.Errorf("the proof: %+v", v)
	}
	if got := readSidecar(t, snap+".json"); got.Encryption == nil || got.SHA256 != side.SHA256 {
		t.Errorf("the proof changed the sidecar's encryption or hash: %+v", got)
	}

	// a ciphertext changed after it was written, its size kept
	stored[len(stored)/2] ^= 0x01
	if err := os.WriteFile(snap, stored, 0o600); err != nil {
		t.Fatal(err)
	}
	r = run("backup", "verify", snap, "--age-identity", rightFile)
	if r.code != 2 || !strings.Contains(r.err, "its age payload does not decrypt") || !strings.Contains(r.err, "do not rely on "+snap) {
		t.Errorf("verify of a tampered ciphertext: exit %d, want 2\n%s", r.code, r.err)
	}
	if v := readSidecar(t, snap+".json").Verified; v == nil || v.Result != "failed" {
		t.Errorf("the tampered snapshot's proof: %+v, want failed", v)
	}
	noLeftovers("verify of a tampered ciphertext")

	// usage: a private key where a recipient goes is refused, not quoted
	r = run("backup", "etcd", "--to", dir+"x.db", "--encrypt-to", right.String())
	if r.code != 64 || !strings.Contains(r.err, "is an age identity (a private key), not a recipient") {
		t.Errorf("--encrypt-to IDENTITY: exit %d, want 64\n%s", r.code, r.err)
	}
	for _, id := range []string{right.String(), wrong.String(), other.String(), kubeSecretValue} {
		if strings.Contains(all.String(), id) {
			t.Errorf("a secret is in an output: %.12s…", id)
		}
	}
	for _, p := range []string{snap + ".json"} {
		if data, _ := os.ReadFile(p); bytes.Contains(data, []byte("AGE-SECRET-KEY")) || bytes.Contains(data, []byte(kubeSecretValue)) {
			t.Errorf("%s holds a secret", p)
		}
	}
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// Issue 34 item 2 on the sim and a real S3 server (versitygw): backup etcd
// --to s3://… --encrypt-to --verify stores ciphertext only and proves the
// restore through the decryption; verify --latest without an identity or
// with a wrong one is refused (exit 2), a tampered object fails; no clear
// copy stays in $TMPDIR and no identity reaches an output.
func TestBackupEncryptedS3(t *testing.T) {
	fixture := kubeSnapshot(t)
	srv := testenv.StartS3(t)
	sf := startSim(t, simtest.Options{Bootstrap: true})
	for _, m := range sf.Sim.Machines() {
		if strings.HasPrefix(m.Name(), "cp-") {
			m.SetFaults(sim.Faults{EtcdSnapshotData: fixture})
		}
	}
	s3Env(t, srv)
	noLeftovers := privateTmp(t)
	keys := t.TempDir()
	right, rightFile := ageKeyFile(t, keys, "right.txt")
	wrong, wrongFile := ageKeyFile(t, keys, "wrong.txt")
	url := "s3://" + srv.Bucket + "/enc/"
	var all strings.Builder
	run := func(args ...string) result {
		t.Helper()
		r := devata(t, nil, append(args, "--config", sf.settings)...)
		show(t, r)
		all.WriteString(r.stdout + r.err)
		return r
	}
	r := run("backup", "etcd", "--to", url, "--encrypt-to", right.Recipient().String(), "--verify", "--age-identity", rightFile)
	if r.code != 0 {
		t.Fatalf("backup --encrypt-to --verify to S3: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	lacks(t, "backup's stdout", r.stdout, "written to "+url+"etcd-homelab-", "age-encrypted to "+right.Recipient().String(), "restores: etcd 3.7.1 served revision")
	noLeftovers("backup etcd --encrypt-to to S3")
	l := listDir(t, sf, url)
	if len(l.Snapshots) != 1 || l.Snapshots[0].Verified == nil || l.Snapshots[0].Verified.Result != "restored" {
		t.Fatalf("list: %+v", l)
	}
	name := l.Snapshots[0].Name
	obj := filepath.Join(srv.Dir, srv.Bucket, "enc", name)
	stored, err := os.ReadFile(obj)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(stored, []byte("age-encryption.org/v1\n")) || bytes.Contains(stored, []byte(kubeSecretValue)) {
		t.Errorf("the object %s is not age ciphertext alone", name)
	}
	r = run("backup", "list", url, "-o", "json")
	lacks(t, "list's JSON", r.stdout, `"encrypted": true`, right.Recipient().String())

	for what, args := range map[string][]string{"no identity": nil, "wrong identity": {"--age-identity", wrongFile}} {
		r := run(append([]string{"backup", "verify", "--latest", url}, args...)...)
		if r.code != 2 || !strings.Contains(r.err, "is age-encrypted to "+right.Recipient().String()) || !strings.Contains(r.err, "--age-identity") {
			t.Errorf("verify --latest with %s: exit %d, want 2 naming the recipient\n%s", what, r.code, r.err)
		}
		noLeftovers("verify with " + what)
	}
	stored[len(stored)-100] ^= 0x01
	if err := os.WriteFile(obj, stored, 0o600); err != nil {
		t.Fatal(err)
	}
	r = run("backup", "verify", url+name, "--age-identity", rightFile)
	if r.code != 2 || !strings.Contains(r.err, "its age payload does not decrypt") {
		t.Errorf("verify of a tampered object: exit %d, want 2\n%s", r.code, r.err)
	}
	noLeftovers("verify of a tampered object")
	for _, secret := range []string{right.String(), wrong.String(), srv.SecretKey, kubeSecretValue} {
		if strings.Contains(all.String(), secret) {
			t.Errorf("a secret is in an output: %.8s…", secret)
		}
	}
}

// bootstrap --recover-from an encrypted snapshot: with no identity, a
// wrong one or a tampered ciphertext it is refused before any machine is
// asked anything (exit 2, the sim records no Bootstrap, EtcdRecover or
// apply); plan's runbook names the file as given and decrypts it for
// talosctl; with the right identity the cluster is rebuilt from it, and
// no clear copy stays behind.
func TestBootstrapRecoverFromEncrypted(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	keys := t.TempDir()
	right, rightFile := ageKeyFile(t, keys, "right.txt")
	wrong, wrongFile := ageKeyFile(t, keys, "wrong.txt")
	dir := t.TempDir()
	snap := filepath.Join(dir, "etcd.snapshot")
	if r := devata(t, nil, "backup", "etcd", "--to", snap, "--encrypt-to", right.Recipient().String(), "--config", sf.settings); r.code != 0 {
		t.Fatalf("backup: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	before := sf.Sim.EtcdClusters()[0].Revision
	// the operator's bundle is encrypted to the same key: a bundle in clear
	// is refused while an identity is given (bootstrap's readBundle)
	to, err := render.ParseAgeRecipients([]string{right.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	if err := render.WriteSecretsEncrypted(filepath.Join(sf.Dir, "secrets.yaml"), sf.Bundle, to, true); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		sf.Sim.Machine(name).Wipe()
	}
	for _, name := range []string{"cp-1", "cp-2", "cp-3"} {
		m := sf.Sim.Machine(name)
		for deadline := time.Now().Add(20 * time.Second); m.Configured() || m.Observe().Down; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s not back in maintenance mode", name)
			}
		}
	}
	noLeftovers := privateTmp(t)
	sent := func() int {
		n := 0
		for _, m := range sf.Sim.Machines() {
			n += m.Calls("Bootstrap") + m.Calls("EtcdRecover") + m.Calls("ApplyConfiguration")
		}
		return n
	}
	sentBefore := sent()

	tampered := filepath.Join(dir, "tampered.snapshot")
	data, _ := os.ReadFile(snap)
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(tampered, data, 0o600); err != nil {
		t.Fatal(err)
	}
	side, _ := os.ReadFile(snap + ".json")
	if err := os.WriteFile(tampered+".json", bytes.Replace(side, []byte(`"etcd.snapshot"`), []byte(`"tampered.snapshot"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	noSidecar := filepath.Join(dir, "bare.snapshot")
	if err := os.WriteFile(noSidecar, data, 0o600); err != nil {
		t.Fatal(err)
	}

	var all strings.Builder
	for what, c := range map[string]struct {
		args []string
		want []string
	}{
		"no identity":    {[]string{"--recover-from", snap}, []string{"none is given", "is age-encrypted to " + right.Recipient().String(), "pass --age-identity FILE"}},
		"wrong identity": {[]string{"--recover-from", snap, "--age-identity", wrongFile}, []string{"it does not open with the 1 age identity from age identity file " + wrongFile, right.Recipient().String()}},
		"tampered":       {[]string{"--recover-from", tampered, "--age-identity", rightFile}, []string{"its age payload does not decrypt"}},
		"no sidecar":     {[]string{"--recover-from", noSidecar, "--age-identity", rightFile}, []string{"is age-encrypted but has no sidecar", "age -d -i IDENTITY_FILE"}},
	} {
		for _, cmd := range [][]string{bootstrapArgs(sf, nil, c.args...), append([]string{"plan", "--config", sf.settings, "--skip-nodes"}, c.args...)} {
			r := devata(t, nil, cmd...)
			show(t, r)
			all.WriteString(r.stdout + r.err)
			if r.code != 2 {
				t.Errorf("%s with %s: exit %d, want 2\n%s%s", cmd[0], what, r.code, r.stdout, r.err)
			}
			lacks(t, cmd[0]+" with "+what, r.err, append(c.want, "nothing was sent to any machine")...)
			noLeftovers(cmd[0] + " with " + what)
		}
	}
	if n := sent(); n != sentBefore {
		t.Fatalf("%d Bootstrap, EtcdRecover or ApplyConfiguration calls were made by refused recoveries", n-sentBefore)
	}

	r := devata(t, nil, "plan", "-o", "markdown", "--config", sf.settings, "--skip-nodes", "--recover-from", snap, "--age-identity", rightFile)
	show(t, r)
	all.WriteString(r.stdout + r.err)
	lacks(t, "the recovery runbook", r.stdout, "from the snapshot "+snap, "age -d -i IDENTITY_FILE -o snapshot.db "+snap, "--recover-from=snapshot.db")
	noLeftovers("plan")

	r = devata(t, nil, bootstrapArgs(sf, nil, "--recover-from", snap, "--age-identity", rightFile)...)
	show(t, r)
	all.WriteString(r.stdout + r.err)
	if r.code != 0 || !strings.Contains(r.stdout, "recovered etcd on cp-1 from "+snap) {
		t.Fatalf("bootstrap --recover-from an encrypted snapshot: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if cs := sf.Sim.EtcdClusters(); len(cs) != 1 || len(cs[0].Members) != 3 || cs[0].Revision < before {
		t.Errorf("etcd after the recovery: %+v, want one cluster of three at revision %d or later", cs, before)
	}
	noLeftovers("bootstrap --recover-from")
	for _, id := range []string{right.String(), wrong.String()} {
		if strings.Contains(all.String(), id) {
			t.Errorf("an identity is in an output: %.12s…", id)
		}
	}
}

// --encrypt-to-bundle-recipients takes the recipients a sops-encrypted
// bundle lists (the test-only fixture sops 3.13.3 wrote), beside
// --encrypt-to's, and the snapshot opens with that bundle's identity; an
// age-encrypted bundle records none, so the backup is refused (exit 2)
// before anything is written.
func TestBackupEncryptToBundleRecipients(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	const fixtures = "../../render/testdata/encrypted/"
	bundle := filepath.Join(sf.Dir, "secrets.yaml")
	copyFile := func(from string) {
		t.Helper()
		data, err := os.ReadFile(fixtures + from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bundle, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("talosctl-secrets.sops.yaml")
	idData, err := os.ReadFile(fixtures + "TEST-ONLY-age-identity.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := age.ParseIdentities(bytes.NewReader(idData))
	if err != nil {
		t.Fatal(err)
	}
	bundleRecipient := ids[0].(*age.X25519Identity).Recipient().String()
	own, _ := ageKeyFile(t, t.TempDir(), "own.txt")
	noLeftovers := privateTmp(t)
	dir := t.TempDir()
	snap := filepath.Join(dir, "etcd.db")
	r := devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", snap, "--encrypt-to", own.Recipient().String(), "--encrypt-to-bundle-recipients")
	show(t, r)
	if r.code != 0 {
		t.Fatalf("backup --encrypt-to-bundle-recipients: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	noLeftovers("backup etcd")
	side := readSidecar(t, snap+".json")
	if side.Encryption == nil || strings.Join(side.Encryption.Recipients, " ") != own.Recipient().String()+" "+bundleRecipient {
		t.Fatalf("the sidecar's encryption: %+v, want [%s %s]", side.Encryption, own.Recipient(), bundleRecipient)
	}
	keys := func() ([]age.Identity, string, error) { return ids, "the test-only identity", nil }
	clear, err := backup.DecryptSnapshot(t.Context(), snap, &side, keys, t.TempDir())
	if err != nil {
		t.Fatalf("the bundle's identity does not open the snapshot: %v", err)
	}
	if data, _ := os.ReadFile(clear); int64(len(data)) != side.Encryption.PlaintextSize {
		t.Errorf("the clear text is %d bytes, the sidecar says %d", len(data), side.Encryption.PlaintextSize)
	}

	copyFile("talosctl-secrets.yaml.age")
	other := filepath.Join(dir, "other.db")
	r = devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", other, "--encrypt-to-bundle-recipients")
	if r.code != 2 || !strings.Contains(r.err, "does not record its recipients") || !strings.Contains(r.err, "--encrypt-to age1") {
		t.Errorf("with an age-encrypted bundle: exit %d, want 2 and --encrypt-to\n%s", r.code, r.err)
	}
	if _, err := os.Lstat(other); err == nil {
		t.Errorf("%s was written", other)
	}
}

// The setting backup.encrypt-to: DEVATA_BACKUP_ENCRYPT_TO (what deploy/'s
// CronJob sets from its ConfigMap) or the settings file's backup section
// encrypts without --encrypt-to; --encrypt-to replaces it; a private key
// in the setting is refused naming where it came from, without echoing
// it, and nothing is written.
func TestBackupEncryptToSetting(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	keys := t.TempDir()
	one, _ := ageKeyFile(t, keys, "one.txt")
	two, _ := ageKeyFile(t, keys, "two.txt")
	flag, _ := ageKeyFile(t, keys, "flag.txt")
	privateTmp(t)
	dir := t.TempDir() + "/"
	recipients := func(name string) string {
		t.Helper()
		side := readSidecar(t, dir+name+".json")
		if side.Encryption == nil {
			return "(in clear)"
		}
		return strings.Join(side.Encryption.Recipients, " ")
	}

	env := map[string]string{config.EnvBackupEncryptTo: one.Recipient().String() + "," + two.Recipient().String()}
	r := devata(t, env, "backup", "etcd", "--to", dir+"env.db", "--config", sf.settings)
	show(t, r)
	if r.code != 0 {
		t.Fatalf("backup with DEVATA_BACKUP_ENCRYPT_TO: exit %d\n%s", r.code, r.err)
	}
	if got, want := recipients("env.db"), one.Recipient().String()+" "+two.Recipient().String(); got != want {
		t.Errorf("with DEVATA_BACKUP_ENCRYPT_TO: encrypted to %s, want %s", got, want)
	}

	r = devata(t, env, "backup", "etcd", "--to", dir+"flag.db", "--config", sf.settings, "--encrypt-to", flag.Recipient().String())
	show(t, r)
	if got := recipients("flag.db"); r.code != 0 || got != flag.Recipient().String() {
		t.Errorf("--encrypt-to over the setting: exit %d, encrypted to %s, want %s alone", r.code, got, flag.Recipient())
	}

	settings, err := os.ReadFile(sf.settings)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(filepath.Dir(sf.settings), "with-backup.yaml")
	if err := os.WriteFile(file, append(settings, []byte("\nbackup:\n  encrypt-to: "+two.Recipient().String()+"\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "backup", "etcd", "--to", dir+"file.db", "--config", file)
	show(t, r)
	if got := recipients("file.db"); r.code != 0 || got != two.Recipient().String() {
		t.Errorf("backup.encrypt-to in the settings file: exit %d, encrypted to %s, want %s", r.code, got, two.Recipient())
	}

	r = devata(t, map[string]string{config.EnvBackupEncryptTo: one.String()}, "backup", "etcd", "--to", dir+"bad.db", "--config", sf.settings)
	show(t, r)
	if r.code != 2 || !strings.Contains(r.err, config.EnvBackupEncryptTo+": recipient 1 is an age identity (a private key)") || strings.Contains(r.stdout+r.err, one.String()) {
		t.Errorf("a private key in DEVATA_BACKUP_ENCRYPT_TO: exit %d, want 2 naming the variable and not echoing the key\n%s", r.code, r.err)
	}
	if _, err := os.Stat(dir + "bad.db"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a refused setting left %s: %v", dir+"bad.db", err)
	}
}
