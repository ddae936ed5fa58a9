package main

import (
	"bytes"
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"golang.org/x/crypto/ssh"

	"devata.dev/devata/config"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// sshKeyFiles writes a fresh SSH key pair as ssh-keygen does with an empty passphrase (the
// private key unencrypted in OpenSSH's format, mode 0600, and FILE.pub
// with a comment) and returns the public key line without its comment
// (as a sidecar records it), the line of FILE.pub and the private key's path.
func sshKeyFiles(t *testing.T, dir, name string, key crypto.Signer) (bare, line, private string) {
	t.Helper()
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, name+"@devata-test")
	if err != nil {
		t.Fatal(err)
	}
	private = filepath.Join(dir, name)
	if err := os.WriteFile(private, pem.EncodeToMemory(block), 0o600); err != nil {
		t.Fatal(err)
	}
	bare = strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	line = bare + " " + name + "@devata-test"
	if err := os.WriteFile(private+".pub", []byte(line+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bare, line, private
}

func ed25519Key(t *testing.T) ed25519.PrivateKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// --encrypt-to-file reads age's -R format: one recipient a line (age and
// SSH public keys, comments after an SSH key), blank lines and # comments
// skipped; a symbolic link, a directory, a file without a recipient, a
// line that is no public key, a private key, a binary or overlong line are
// refused naming the file and the line, quoting none of it.
func TestReadRecipientsFile(t *testing.T) {
	dir := t.TempDir()
	x, _ := age.GenerateX25519Identity()
	edBare, edLine, edPrivate := sshKeyFiles(t, dir, "id_ed25519", ed25519Key(t))
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rsaBare, rsaLine, _ := sshKeyFiles(t, dir, "id_rsa", rsaKey)
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}

	good := write("recipients.txt", "# the offline keys\n\n"+x.Recipient().String()+"\n  "+edLine+"  \n# and the admin's\n"+rsaLine+"\n")
	rs, err := readRecipientsFile(good)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rs {
		got = append(got, r.(interface{ String() string }).String())
	}
	if want := []string{x.Recipient().String(), edBare, rsaBare}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("read %q, want %q", got, want)
	}

	link := filepath.Join(dir, "link.txt")
	if err := os.Symlink(good, link); err != nil {
		t.Fatal(err)
	}
	private, err := os.ReadFile(edPrivate)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, want string
	}{
		{"symbolic link", link, link + " is a symbolic link, which devata does not follow"},
		{"directory", dir, dir + " is not a regular file"},
		{"missing", filepath.Join(dir, "absent.txt"), "no such file or directory"},
		{"only comments", write("empty.txt", "# nobody yet\n\n"), "holds no recipient (only blank lines and # comments)"},
		{"age identity", write("identity.txt", x.Recipient().String()+"\n"+x.String()+"\n"), "identity.txt line 2 is an age identity (a private key), not a recipient"},
		{"SSH private key", write("private.txt", string(private)), "private.txt line 1 is a private key (PEM), not a recipient"},
		{"not a key", write("junk.txt", "# ok\n"+x.Recipient().String()+"\nhunter2-not-a-key\n"), "junk.txt line 3 is not an age public key"},
		{"binary", write("binary.txt", "\xff\xfe\x00\x01\n"), "binary.txt line 1 is not UTF-8 text"},
		{"overlong", write("long.txt", x.Recipient().String()+"\n"+strings.Repeat("A", 9000)+"\n"), "long.txt line 2 is longer than 8 KiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readRecipientsFile(c.path)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			for _, secret := range []string{x.String()[16:40], "hunter2", strings.Split(string(private), "\n")[1][:24]} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("the error quotes the file: %v", err)
				}
			}
		})
	}
}

// SSH keys as recipients and identities on the sim, as the age CLI takes
// them: backup etcd encrypts to an ssh-ed25519 key given to --encrypt-to
// (with its comment) and the ssh-rsa and age keys of an --encrypt-to-file;
// the sidecar names the three keys (without comments); backup verify
// proves the restore with either SSH private key file as --age-identity,
// and a backup from DEVATA_BACKUP_ENCRYPT_TO (an SSH key and an age key
// separated by a comma) is encrypted to both. No private key reaches an
// output or the sidecar.
func TestBackupEncryptToSSH(t *testing.T) {
	fixture := kubeSnapshot(t)
	sf := startSim(t, simtest.Options{Bootstrap: true})
	for _, m := range sf.Sim.Machines() {
		if strings.HasPrefix(m.Name(), "cp-") {
			m.SetFaults(sim.Faults{EtcdSnapshotData: fixture})
		}
	}
	keys := t.TempDir()
	edBare, edLine, edPrivate := sshKeyFiles(t, keys, "id_ed25519", ed25519Key(t))
	rsaKey, err := rsa.GenerateKey(rand.Reader, 3072)
	if err != nil {
		t.Fatal(err)
	}
	rsaBare, rsaLine, rsaPrivate := sshKeyFiles(t, keys, "id_rsa", rsaKey)
	offline, _ := ageKeyFile(t, keys, "offline.txt")
	_, _, strangerPrivate := sshKeyFiles(t, keys, "id_stranger", ed25519Key(t))
	recipientsFile := filepath.Join(keys, "recipients.txt")
	if err := os.WriteFile(recipientsFile, []byte("# admins\n"+rsaLine+"\n"+offline.Recipient().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noLeftovers := privateTmp(t)
	var all strings.Builder
	run := func(env map[string]string, args ...string) result {
		t.Helper()
		r := devata(t, env, append(args, "--config", sf.settings)...)
		show(t, r)
		all.WriteString(r.stdout + r.err)
		return r
	}
	dir := t.TempDir() + "/"
	snap := dir + "etcd.db"

	r := run(nil, "backup", "etcd", "--to", snap, "--encrypt-to", edLine, "--encrypt-to-file", recipientsFile)
	if r.code != 0 {
		t.Fatalf("backup etcd --encrypt-to SSH --encrypt-to-file: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	noLeftovers("backup etcd")
	stored, err := os.ReadFile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(stored, []byte("age-encryption.org/v1\n-> ssh-ed25519 ")) || !bytes.Contains(stored, []byte("\n-> ssh-rsa ")) || bytes.Contains(stored, fixture[:4096]) {
		t.Errorf("%s is not age ciphertext with ssh-ed25519 and ssh-rsa stanzas", snap)
	}
	side := readSidecar(t, snap+".json")
	if side.Encryption == nil || strings.Join(side.Encryption.Recipients, "|") != edBare+"|"+rsaBare+"|"+offline.Recipient().String() {
		t.Fatalf("the sidecar's encryption %+v, want the ed25519, RSA and age keys in that order, without comments", side.Encryption)
	}

	r = run(nil, "backup", "verify", snap, "--age-identity", strangerPrivate)
	if r.code != 2 || !strings.Contains(r.err, "it does not open with the 1 age identity from age identity file "+strangerPrivate) || !strings.Contains(r.err, edBare) {
		t.Errorf("verify with an unrelated SSH key: exit %d, want 2 naming the file and the recipients\n%s", r.code, r.err)
	}
	for _, id := range []string{edPrivate, rsaPrivate} {
		r = run(nil, "backup", "verify", snap, "--age-identity", id)
		if r.code != 0 {
			t.Fatalf("verify with %s: exit %d\n%s%s", filepath.Base(id), r.code, r.stdout, r.err)
		}
		lacks(t, "verify's stdout with "+filepath.Base(id), r.stdout, snap+" restores: etcd", "3 nodes")
		if v := readSidecar(t, snap+".json").Verified; v == nil || v.Result != "restored" || v.Revision != side.EtcdRevision {
			t.Errorf("the proof with %s: %+v", filepath.Base(id), v)
		}
		noLeftovers("verify")
	}

	env := map[string]string{config.EnvBackupEncryptTo: edLine + ", " + offline.Recipient().String()}
	r = run(env, "backup", "etcd", "--to", dir+"env.db")
	if r.code != 0 {
		t.Fatalf("backup etcd with an SSH key in %s: exit %d\n%s", config.EnvBackupEncryptTo, r.code, r.err)
	}
	if s := readSidecar(t, dir+"env.db.json"); s.Encryption == nil || strings.Join(s.Encryption.Recipients, "|") != edBare+"|"+offline.Recipient().String() {
		t.Errorf("from %s: encryption %+v, want the SSH key and the age key", config.EnvBackupEncryptTo, s.Encryption)
	}

	r = run(nil, "backup", "etcd", "--to", dir+"bad.db", "--encrypt-to-file", edPrivate)
	if r.code != 64 || !strings.Contains(r.err, "--encrypt-to-file: "+edPrivate+" line 1 is a private key (PEM), not a recipient") {
		t.Errorf("--encrypt-to-file PRIVATE_KEY: exit %d, want 64\n%s", r.code, r.err)
	}
	if _, err := os.Stat(dir + "bad.db"); err == nil {
		t.Error("a refused recipients file left a snapshot")
	}
	for _, p := range []string{edPrivate, rsaPrivate} {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		body := strings.Split(string(data), "\n")[2]
		if strings.Contains(all.String(), body) {
			t.Errorf("%s is quoted in an output", p)
		}
		for _, s := range []string{snap + ".json", dir + "env.db.json"} {
			if side, _ := os.ReadFile(s); bytes.Contains(side, []byte(body)) || bytes.Contains(side, []byte("PRIVATE KEY")) {
				t.Errorf("%s holds a private key", s)
			}
		}
	}
}
