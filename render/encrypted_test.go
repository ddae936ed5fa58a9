package render_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// Fixtures made with the real tools (see testdata/encrypted/README.md),
// all encrypted to the committed test-only identity.
const (
	encDir          = "testdata/encrypted"
	testOnlyKeyFile = encDir + "/TEST-ONLY-age-identity.txt"
	clearFixture    = "testdata/talosctl-secrets.yaml"
)

// testOnlySecret is the identity line of the test-only key file.
func testOnlySecret(t *testing.T) string {
	t.Helper()
	for _, l := range strings.Split(string(readFile(t, testOnlyKeyFile)), "\n") {
		if strings.HasPrefix(l, "AGE-SECRET-KEY-") {
			return l
		}
	}
	t.Fatal("no identity in " + testOnlyKeyFile)
	return ""
}

// A checkout makes the fixture key 0644 (Git keeps no mode bits but
// execute), which devata refuses as ssh refuses such keys: the tests make it
// the owner's alone, as a key file should be.
func init() {
	if err := os.Chmod(testOnlyKeyFile, 0o600); err != nil {
		panic(err)
	}
}

func testOnlyKeys() render.AgeIdentities {
	return render.AgeIdentities{KeyFile: testOnlyKeyFile}
}

// newIdentity writes a fresh age identity file and returns it and its path.
func newIdentity(t *testing.T) (*age.X25519Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(path, []byte("# created by a test\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id, path
}

func marshal(t *testing.T, b *secrets.Bundle) []byte {
	t.Helper()
	data, err := render.MarshalSecrets(b)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// assertQuotesNothing fails when msg shares any 12-character run with one
// of the texts (file content, clear text, key material), once the names of
// formats, which the texts contain too, are taken out.
func assertQuotesNothing(t *testing.T, msg string, texts ...[]byte) {
	t.Helper()
	for _, vocabulary := range []string{"ENC[AES256_GCM,", "AGE-SECRET-KEY-", "sops.lastmodified", "sops.age[].enc"} {
		msg = strings.ReplaceAll(msg, vocabulary, "\x00")
	}
	const n = 12
	for i := 0; i+n <= len(msg); i++ {
		w := []byte(msg[i : i+n])
		for _, text := range texts {
			if bytes.Contains(text, w) {
				t.Fatalf("error quotes content (%q): %s", w, msg)
			}
		}
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// Bundles encrypted by the real age CLI (armored and binary) and by the
// real sops binary (age recipient) decrypt to the talosctl bundle they were
// made from.
func TestRealToolFixturesDecrypt(t *testing.T) {
	want, err := render.LoadSecretsWith(clearFixture, render.AgeIdentities{})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"talosctl-secrets.yaml.age",          // age -a
		"talosctl-secrets.binary.age",        // age
		"talosctl-secrets.sops.yaml",         // sops --encrypt --age
		"talosctl-secrets.regex.sops.yaml",   // sops --encrypted-regex: certificates stay clear, in the MAC
		"talosctl-secrets.maconly.sops.yaml", // sops --mac-only-encrypted
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(encDir, name)
			if raw := readFile(t, path); bytes.Contains(raw, []byte(want.Secrets.BootstrapToken)) || bytes.Contains(raw, []byte(want.Cluster.Secret)) {
				t.Fatal("fixture is not encrypted")
			}
			got, err := render.LoadSecretsWith(path, testOnlyKeys())
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(marshal(t, got), marshal(t, want)) {
				t.Error("decrypted bundle differs from the clear one")
			}
			if inv, _ := loadFixture(t); len(mustRender(t, inv, got)) != len(inv.Machines) {
				t.Error("not every machine rendered")
			}
		})
	}
}

func mustRender(t *testing.T, inv *inventory.Inventory, b *secrets.Bundle) []*render.Rendered {
	t.Helper()
	out, err := render.Validated(inv, b)
	if err != nil {
		t.Fatalf("decrypted bundle does not render: %v", err)
	}
	return out
}

// gen secrets --encrypt-to's path: armored age, mode 0600, no clear text on
// disk, and it loads with a matching identity and with no other.
func TestWriteSecretsEncryptedRoundTrip(t *testing.T) {
	_, b := loadFixture(t)
	id, keyFile := newIdentity(t)
	other, _ := age.GenerateX25519Identity()
	to, err := render.ParseAgeRecipients([]string{other.Recipient().String(), id.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "secrets.yaml")
	if err := render.WriteSecretsEncrypted(path, b, to, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	raw := readFile(t, path)
	if !bytes.HasPrefix(raw, []byte("-----BEGIN AGE ENCRYPTED FILE-----\n")) {
		t.Errorf("not armored age: starts %q", raw[:min(len(raw), 40)])
	}
	clear := marshal(t, b)
	assertQuotesNothing(t, string(raw), []byte(b.Secrets.BootstrapToken), []byte(b.Cluster.Secret))
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("write left other files: %v", entries)
	}

	got, err := render.LoadSecretsWith(path, render.AgeIdentities{KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(marshal(t, got), clear) {
		t.Error("bundle changed through encryption")
	}
	// the other recipient opens it too, given inline as SOPS_AGE_KEY is
	if _, err := render.LoadSecretsWith(path, render.AgeIdentities{Key: other.String()}); err != nil {
		t.Errorf("second recipient: %v", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("loading wrote files: %v", entries)
	}

	if err := render.WriteSecretsEncrypted(path, b, to, false); !errors.Is(err, render.ErrExists) {
		t.Errorf("second write without force: %v, want ErrExists", err)
	}
}

// The error for a key that does not match names the file, the key source
// and what to do, and quotes neither the file, the clear text nor the key.
func TestWrongKeyErrorNamesFileAndNextStep(t *testing.T) {
	clear := readFile(t, clearFixture)
	wrong, wrongFile := newIdentity(t)
	for _, name := range []string{"talosctl-secrets.yaml.age", "talosctl-secrets.binary.age", "talosctl-secrets.sops.yaml"} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(encDir, name)
			_, err := render.LoadSecretsWith(path, render.AgeIdentities{KeyFile: wrongFile})
			var de *render.DecryptError
			if !errors.As(err, &de) || !de.NoIdentity {
				t.Fatalf("err %v, want a DecryptError for a missing identity", err)
			}
			msg := err.Error()
			for _, want := range []string{path, "SOPS_AGE_KEY_FILE (" + wrongFile + ")", "set SOPS_AGE_KEY_FILE to the age identity file that can decrypt it"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error lacks %q: %s", want, msg)
				}
			}
			assertQuotesNothing(t, msg, readFile(t, path), clear, []byte(wrong.String()), []byte(testOnlySecret(t)))
		})
	}
}

func TestNoIdentitySaysWhatToSet(t *testing.T) {
	for _, name := range []string{"talosctl-secrets.yaml.age", "talosctl-secrets.sops.yaml"} {
		path := filepath.Join(encDir, name)
		_, err := render.LoadSecretsWith(path, render.AgeIdentities{DefaultFile: filepath.Join(t.TempDir(), "absent", "keys.txt")})
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "no age identity is set: pass --age-identity FILE, or set SOPS_AGE_KEY_FILE") {
			t.Errorf("%s without identities: %v", name, err)
		}
		if strings.Contains(err.Error(), "devata gen secrets") {
			t.Errorf("a missing key is not a missing bundle: %v", err)
		}
	}
}

func TestIdentitySources(t *testing.T) {
	path := filepath.Join(encDir, "talosctl-secrets.yaml.age")
	key := readFile(t, testOnlyKeyFile)
	secret := testOnlySecret(t)
	wrong, _ := age.GenerateX25519Identity()

	// sops' default keys.txt, read when it exists
	def := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(def, key, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := render.LoadSecretsWith(path, render.AgeIdentities{DefaultFile: def}); err != nil {
		t.Errorf("default keys.txt: %v", err)
	}
	// SOPS_AGE_KEY holds several identities separated by white space
	if _, err := render.LoadSecretsWith(path, render.AgeIdentities{Key: wrong.String() + " " + secret}); err != nil {
		t.Errorf("two inline identities: %v", err)
	}
	// a SOPS_AGE_KEY_FILE that does not exist is an error, even with a working default
	missing := filepath.Join(t.TempDir(), "typo.txt")
	_, err := render.LoadSecretsWith(path, render.AgeIdentities{KeyFile: missing, DefaultFile: def})
	if err == nil || !strings.Contains(err.Error(), "SOPS_AGE_KEY_FILE names "+missing) {
		t.Errorf("missing key file: %v", err)
	}
	// a malformed line is located, not quoted
	bad := filepath.Join(t.TempDir(), "bad.txt")
	const junk = "AGE-SECRET-KEY-1NOTAREALKEYATALLHUNTER2"
	if err := os.WriteFile(bad, []byte("# comment\n"+junk+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = render.LoadSecretsWith(path, render.AgeIdentities{KeyFile: bad})
	if err == nil || !strings.Contains(err.Error(), bad+") line 2 is not an age identity") {
		t.Errorf("malformed key file: %v", err)
	}
	assertQuotesNothing(t, err.Error(), []byte(junk[len("AGE-SECRET-KEY-1"):]))
	// a passphrase-protected identity file is refused with a reason
	prot := filepath.Join(t.TempDir(), "protected.age")
	if err := os.WriteFile(prot, readFile(t, path), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = render.LoadSecretsWith(path, render.AgeIdentities{KeyFile: prot})
	if err == nil || !strings.Contains(err.Error(), "passphrase-protected identity file") {
		t.Errorf("protected identity file: %v", err)
	}
}

func TestAgeIdentitiesFromEnv(t *testing.T) {
	env := map[string]string{"SOPS_AGE_KEY": "k", "SOPS_AGE_KEY_FILE": "/f", "XDG_CONFIG_HOME": "/cfg", "HOME": "/home/u"}
	got := render.AgeIdentitiesFromEnv(func(k string) string { return env[k] })
	if got.Key != "k" || got.KeyFile != "/f" || got.DefaultFile != "/cfg/sops/age/keys.txt" {
		t.Errorf("from env: %+v", got)
	}
	delete(env, "XDG_CONFIG_HOME")
	if got := render.AgeIdentitiesFromEnv(func(k string) string { return env[k] }); got.DefaultFile != "/home/u/.config/sops/age/keys.txt" {
		t.Errorf("without XDG_CONFIG_HOME: %+v", got)
	}
}

// Damage is reported as damage (restore it), not as a wrong key, and
// quotes nothing.
func TestDamagedAgeFile(t *testing.T) {
	src := readFile(t, filepath.Join(encDir, "talosctl-secrets.binary.age"))
	for name, mutate := range map[string]func([]byte) []byte{
		"payload":   func(b []byte) []byte { b[len(b)-20] ^= 1; return b },
		"truncated": func(b []byte) []byte { return b[:len(b)-100] },
		"header":    func(b []byte) []byte { return bytes.Replace(b, []byte("-> X25519 "), []byte("-> X25519 A"), 1) },
	} {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "secrets.yaml")
			if err := os.WriteFile(path, mutate(bytes.Clone(src)), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := render.LoadSecretsWith(path, testOnlyKeys())
			var de *render.DecryptError
			if !errors.As(err, &de) || de.NoIdentity || !strings.Contains(err.Error(), "restore it from Git") {
				t.Fatalf("damaged %s: %v", name, err)
			}
			assertQuotesNothing(t, err.Error(), src, readFile(t, clearFixture))
		})
	}
}

// An age file that decrypts to something else is not a bundle, said
// without the content.
func TestAgeFileOfSomethingElse(t *testing.T) {
	id, keyFile := newIdentity(t)
	var out bytes.Buffer
	w, err := age.Encrypt(&out, id.Recipient())
	if err != nil {
		t.Fatal(err)
	}
	const text = "certs: [hunter2-password-list]\n"
	if _, err := w.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = render.LoadSecretsWith(path, render.AgeIdentities{KeyFile: keyFile})
	if err == nil || !strings.Contains(err.Error(), "it decrypts (age), but the clear text is not a talosctl secrets bundle") {
		t.Fatalf("err %v", err)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error quotes the clear text: %v", err)
	}
}

func TestParseAgeRecipients(t *testing.T) {
	id, _ := age.GenerateX25519Identity()
	pq, err := age.GenerateHybridIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := render.ParseAgeRecipients([]string{id.Recipient().String(), pq.Recipient().String()}); err != nil {
		t.Errorf("classic and post-quantum recipients parse: %v", err)
	}
	_, err = render.ParseAgeRecipients([]string{id.Recipient().String(), id.String()})
	if err == nil || !strings.Contains(err.Error(), "recipient 2 is an age identity (a private key)") || strings.Contains(err.Error(), id.String()[16:]) {
		t.Errorf("private key as recipient: %v", err)
	}
	if _, err := render.ParseAgeRecipients([]string{"age1nope"}); err == nil || !strings.Contains(err.Error(), "recipient 1 is not an age public key") {
		t.Errorf("bad recipient: %v", err)
	}
	if _, err := render.ParseAgeRecipients(nil); err == nil {
		t.Error("no recipient accepted")
	}
}

// An identity file that is not a regular file is refused before it is read,
// as every file devata reads is.
func TestIdentityFileMustBeARegularFile(t *testing.T) {
	dir := t.TempDir()
	_, err := render.LoadSecretsWith(filepath.Join(encDir, "talosctl-secrets.yaml.age"), render.AgeIdentities{KeyFile: dir})
	if err == nil || !strings.Contains(err.Error(), "SOPS_AGE_KEY_FILE names "+dir+", which cannot be read (is not a regular file (a directory)") {
		t.Errorf("directory as key file: %v", err)
	}
}

// readBundle's size bound holds before any decryption is tried.
func TestEncryptedBundleSizeBound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	big := append([]byte("-----BEGIN AGE ENCRYPTED FILE-----\n"), bytes.Repeat([]byte("A"), inventory.MaxFileSize)...)
	if err := os.WriteFile(path, big, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := render.LoadSecretsWith(path, testOnlyKeys())
	var fe *inventory.FileError
	if !errors.As(err, &fe) || !strings.Contains(err.Error(), "more than the 4 MiB devata reads") {
		t.Errorf("oversized encrypted bundle: %v", err)
	}
}

// Identity files given to devata (--age-identity) open every kind of
// encrypted bundle, several are tried in order, and while any is given
// sops' variables and keys.txt are not read at all: a broken
// SOPS_AGE_KEY_FILE does not stand in the way, and a working SOPS_AGE_KEY
// does not open what the given files do not.
func TestAgeIdentityFilesTakePrecedence(t *testing.T) {
	_, wrongFile := newIdentity(t)
	missing := filepath.Join(t.TempDir(), "typo.txt")
	secret := testOnlySecret(t)
	for _, name := range []string{"talosctl-secrets.yaml.age", "talosctl-secrets.binary.age", "talosctl-secrets.sops.yaml"} {
		path := filepath.Join(encDir, name)
		ids := render.AgeIdentities{Files: []string{wrongFile, testOnlyKeyFile}, KeyFile: missing, DefaultFile: missing}
		if _, err := render.LoadSecretsWith(path, ids); err != nil {
			t.Errorf("%s with a wrong and the right identity file, and a broken SOPS_AGE_KEY_FILE: %v", name, err)
		}
		_, err := render.LoadSecretsWith(path, render.AgeIdentities{Files: []string{wrongFile}, Key: secret, KeyFile: testOnlyKeyFile})
		var de *render.DecryptError
		if !errors.As(err, &de) || !de.NoIdentity {
			t.Fatalf("%s with only a wrong identity file (the right key in SOPS_AGE_KEY): %v, want a DecryptError for a missing identity", name, err)
		}
		msg := err.Error()
		for _, want := range []string{path, "1 age identity from age identity file " + wrongFile, "point --age-identity (DEVATA_AGE_IDENTITY, age-identity in the settings file) at the age identity file that can decrypt it", "SOPS_AGE_KEY, SOPS_AGE_KEY_FILE and sops' keys.txt are not read while it is set"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: error lacks %q: %s", name, want, msg)
			}
		}
		assertQuotesNothing(t, msg, readFile(t, path), []byte(secret))
	}
}

// A given identity file that cannot be used is an error naming it, why and
// what to do, before any decryption; its content is never quoted.
func TestAgeIdentityFileErrors(t *testing.T) {
	path := filepath.Join(encDir, "talosctl-secrets.yaml.age")
	dir := t.TempDir()
	missing := filepath.Join(dir, "absent.txt")
	junk := filepath.Join(dir, "junk.txt")
	const junkLine = "AGE-SECRET-KEY-1NOTAREALKEYATALLHUNTER2"
	if err := os.WriteFile(junk, []byte(junkLine+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := filepath.Join(dir, "big.txt")
	if err := os.WriteFile(big, bytes.Repeat([]byte("#\n"), inventory.MaxFileSize), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		file string
		want string
	}{
		{"missing", missing, "age identity file " + missing + " cannot be read (no such file or directory): point --age-identity (DEVATA_AGE_IDENTITY, age-identity in the settings file) at your age identity file"},
		{"directory", dir, "age identity file " + dir + " cannot be read (is not a regular file (a directory)"},
		{"device", "/dev/zero", "age identity file /dev/zero cannot be read (is not a regular file (a device)"},
		{"too big", big, "age identity file " + big + " cannot be read (is 8388608 bytes, more than the 4 MiB devata reads"},
		{"malformed", junk, "age identity file " + junk + " line 1 is not an age identity"},
		{"empty path", " ", "an empty path is given as an age identity file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := render.LoadSecretsWith(path, render.AgeIdentities{Files: []string{testOnlyKeyFile, c.file}})
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to name %s and say %q", err, path, c.want)
			}
			assertQuotesNothing(t, err.Error(), []byte(junkLine[len("AGE-SECRET-KEY-1"):]), []byte(testOnlySecret(t)))
		})
	}
	// a clear bundle reads no identity at all: a broken one is no error
	if _, err := render.LoadSecretsWith(clearFixture, render.AgeIdentities{Files: []string{missing}}); err != nil {
		t.Errorf("clear bundle with a missing identity file: %v", err)
	}
}

// An identity file others may read is refused, as ssh refuses such a
// private key, saying how to make it the owner's or how to allow it (a
// Kubernetes Secret mounted with an fsGroup is group-readable).
func TestSharedIdentityFileIsRefused(t *testing.T) {
	key := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(key, readFile(t, testOnlyKeyFile), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(key, 0o640); err != nil { // whatever the umask
		t.Fatal(err)
	}
	bundle := filepath.Join(encDir, "talosctl-secrets.yaml.age")
	_, err := render.LoadSecretsWith(bundle, render.AgeIdentities{Files: []string{key}})
	if err == nil || !strings.Contains(err.Error(), "may be read by others than its owner (mode 0640): chmod 600 it") || !strings.Contains(err.Error(), "--allow-shared-age-identity") {
		t.Errorf("a group-readable identity file: %v", err)
	}
	if _, err := render.LoadSecretsWith(bundle, render.AgeIdentities{Files: []string{key}, AllowShared: true}); err != nil {
		t.Errorf("with --allow-shared-age-identity: %v", err)
	}
}

// BundleRecipients reads a sops bundle's age recipients from its metadata
// (what sops was given), and refuses an age file (which records none) and
// a bundle in clear, saying to pass --encrypt-to.
func TestBundleRecipients(t *testing.T) {
	id, err := os.ReadFile("testdata/encrypted/TEST-ONLY-age-identity.txt")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := age.ParseIdentities(bytes.NewReader(id))
	if err != nil {
		t.Fatal(err)
	}
	want := ids[0].(*age.X25519Identity).Recipient().String()
	got, err := render.BundleRecipients("testdata/encrypted/talosctl-secrets.sops.yaml")
	if err != nil || len(got) != 1 || got[0] != want {
		t.Errorf("sops bundle: %v, %v; want [%s]", got, err, want)
	}
	for file, msg := range map[string]string{
		"testdata/encrypted/talosctl-secrets.yaml.age":         "does not record its recipients",
		"testdata/talosctl-secrets.yaml":                       "is in clear",
		"testdata/encrypted/talosctl-secrets.shamir.sops.yaml": "key groups",
	} {
		if _, err := render.BundleRecipients(file); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v, want %q", file, err, msg)
		}
	}
}
