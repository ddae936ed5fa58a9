package render_test

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/pem"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"
	"golang.org/x/crypto/ssh"

	"devata.dev/devata/render"
)

// sshKey is a fresh SSH key pair: its public key line as FILE.pub holds
// it (with a comment) and its private key in OpenSSH's format, unencrypted
// as ssh-keygen writes it with an empty passphrase.
type sshKey struct {
	pub     string // "ssh-ed25519 AAAA… test@devata"
	bare    string // the same without the comment
	private []byte // -----BEGIN OPENSSH PRIVATE KEY-----…
}

func newSSHKey(t *testing.T, key crypto.Signer) sshKey {
	t.Helper()
	pub, err := ssh.NewPublicKey(key.Public())
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "test@devata")
	if err != nil {
		t.Fatal(err)
	}
	bare := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
	return sshKey{pub: bare + " test@devata", bare: bare, private: pem.EncodeToMemory(block)}
}

func newEd25519Key(t *testing.T) sshKey {
	t.Helper()
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return newSSHKey(t, k)
}

func newRSAKey(t *testing.T, bits int) sshKey {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, bits)
	if err != nil {
		t.Fatal(err)
	}
	return newSSHKey(t, k)
}

func writeKey(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// SSH public keys are recipients and unencrypted OpenSSH private keys
// identities, as the age CLI takes them (age -r "ssh-ed25519 …",
// age -d -i ~/.ssh/id_ed25519): what is encrypted to an ed25519 and an RSA
// public key (comment and all) opens with either private key file given
// as --age-identity, and not with an unrelated one; a recipient's String
// is its key without the comment, as a sidecar records it.
func TestSSHRecipientsAndIdentities(t *testing.T) {
	ed, rsaKey := newEd25519Key(t), newRSAKey(t, 2048)
	x, _ := age.GenerateX25519Identity()
	rs, err := render.ParseAgeRecipients([]string{ed.pub, rsaKey.pub, x.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []string{ed.bare, rsaKey.bare, x.Recipient().String()} {
		if s, ok := rs[i].(interface{ String() string }); !ok || s.String() != want {
			t.Errorf("recipient %d prints as %v, want %q", i+1, rs[i], want)
		}
	}
	var sealed bytes.Buffer
	w, err := age.Encrypt(&sealed, rs...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(w, "etcd snapshot"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []sshKey{ed, rsaKey} {
		path := writeKey(t, "id", k.private)
		ids, from, err := render.AgeIdentities{Files: []string{path}}.Load()
		if err != nil || len(ids) != 1 || from != "1 age identity from age identity file "+path {
			t.Fatalf("%s as --age-identity: %v, %q, %v", strings.Fields(k.pub)[0], ids, from, err)
		}
		r, err := age.Decrypt(bytes.NewReader(sealed.Bytes()), ids...)
		if err != nil {
			t.Fatalf("%s's private key does not open what was encrypted to its public key: %v", strings.Fields(k.pub)[0], err)
		}
		if got, _ := io.ReadAll(r); string(got) != "etcd snapshot" {
			t.Errorf("decrypted %q", got)
		}
	}
	other := writeKey(t, "id", newEd25519Key(t).private)
	ids, _, err := render.AgeIdentities{Files: []string{other}}.Load()
	if err != nil {
		t.Fatal(err)
	}
	var nomatch *age.NoIdentityMatchError
	if _, err := age.Decrypt(bytes.NewReader(sealed.Bytes()), ids...); !errors.As(err, &nomatch) {
		t.Errorf("an unrelated SSH key opened it, or failed otherwise: %v", err)
	}
}

// What is not an SSH recipient is refused by position, saying what to
// give instead, without quoting the key: a key too short for age, a type
// age does not encrypt to, a private key, an authorized_keys line with
// options, a damaged key.
func TestSSHRecipientErrors(t *testing.T) {
	ed := newEd25519Key(t)
	short := newRSAKey(t, 1024)
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecKey := newSSHKey(t, ec)
	for _, c := range []struct {
		name, value, want string
		secret            []byte
	}{
		{"RSA of 1024 bits", short.pub, "recipient 2 is an RSA key of 1024 bits, fewer than the 2048 age encrypts to", nil},
		{"ECDSA", ecKey.pub, "recipient 2 is an SSH key of type ecdsa-sha2-nistp256, which age does not encrypt to", nil},
		{"private key", string(ed.private), "recipient 2 is a private key (PEM), not a recipient", ed.private},
		{"options", `command="true" ` + ed.pub, "recipient 2 is an authorized_keys line with options or more than one key", nil},
		{"damaged", ed.bare[:40] + "!" + ed.bare[41:], "recipient 2 is not an SSH public key line", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			x, _ := age.GenerateX25519Identity()
			_, err := render.ParseAgeRecipients([]string{x.Recipient().String(), c.value})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want %q", err, c.want)
			}
			assertQuotesNothing(t, err.Error(), []byte(strings.Fields(c.value + " x")[1]), c.secret)
		})
	}
}

// An SSH private key given as --age-identity that devata cannot use is
// refused naming the file and what to do, quoting none of it: one with a
// passphrase (devata never prompts), a public key file, a key of a type
// age does not use, a PEM block that is no key, and an SSH key among age
// identities in one file.
func TestSSHIdentityErrors(t *testing.T) {
	ed := newEd25519Key(t)
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKeyWithPassphrase(k, "", []byte("hunter2hunter2"))
	if err != nil {
		t.Fatal(err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := age.GenerateX25519Identity()
	for _, c := range []struct {
		name string
		data []byte
		want string
	}{
		{"passphrase", pem.EncodeToMemory(block), "is a passphrase-protected SSH private key, which devata cannot open without a prompt"},
		{"public key file", []byte(ed.pub + "\n"), "line 1 is an SSH public key, a recipient: give the private key file"},
		{"ECDSA", newSSHKey(t, ec).private, "is an SSH private key of a type age does not decrypt with"},
		{"not a key", []byte("-----BEGIN CERTIFICATE-----\nMIIBdzCCAR2gAwIBAgIUKw==\n-----END CERTIFICATE-----\n"), "starts with -----BEGIN but is not an SSH private key that parses"},
		{"among age identities", append([]byte(x.String()+"\n"), ed.private...), "line 2 starts an SSH private key among other lines: give the SSH key file alone"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := writeKey(t, "id", c.data)
			_, _, err := render.AgeIdentities{Files: []string{path}}.Load()
			if err == nil || !strings.Contains(err.Error(), "age identity file "+path) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err %v, want it to name %s and say %q", err, path, c.want)
			}
			assertQuotesNothing(t, err.Error(), c.data[min(len(c.data), 40):])
		})
	}
}
