package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"devata.dev/devata/render"
)

// gen secrets --encrypt-to writes an armored age bundle (0600, no clear
// text); validate and gen config open it with SOPS_AGE_KEY_FILE and fail,
// saying what to set, without it.
func TestGenSecretsEncryptToRoundTrip(t *testing.T) {
	inv := homelab(t)
	dir := filepath.Dir(inv)
	bundle := filepath.Join(dir, "secrets.yaml")
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(t.TempDir(), "keys.txt")
	if err := os.WriteFile(keyFile, []byte(id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	r := devata(t, nil, "gen", "secrets", "-i", inv, "--encrypt-to", id.Recipient().String())
	if r.code != 0 {
		t.Fatalf("gen secrets --encrypt-to: exit %d: %s", r.code, r.err)
	}
	if !strings.Contains(r.stdout, "age-encrypted (armored) to 1 recipient (mode 0600)") || !strings.Contains(r.stdout, "SOPS_AGE_KEY_FILE") {
		t.Errorf("stdout does not say how it was written and how to open it: %s", r.stdout)
	}
	st, err := os.Stat(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("bundle mode %v, want 0600", st.Mode().Perm())
	}
	raw, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(raw), "-----BEGIN AGE ENCRYPTED FILE-----") || strings.Contains(string(raw), "bootstraptoken") {
		t.Fatalf("bundle is not armored age")
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("left %s behind", e.Name())
		}
	}

	// without an identity: a clear error naming the bundle and the variable,
	// and no throwaway bundle in its place
	t.Setenv(render.EnvAgeKeyFile, "")
	t.Setenv(render.EnvAgeKey, "")
	r = devata(t, nil, "validate", "-i", inv)
	if r.code == 0 || !strings.Contains(r.err, bundle+" is age-encrypted: no age identity is set: pass --age-identity FILE, or set SOPS_AGE_KEY_FILE") || strings.Contains(r.err, "throwaway") {
		t.Errorf("validate without a key: exit %d, stderr %q", r.code, r.err)
	}
	r = devata(t, nil, "gen", "config", "-i", inv, "-o", filepath.Join(dir, "out"))
	if r.code != 2 || !strings.Contains(r.err, "set SOPS_AGE_KEY_FILE to the age identity file that can decrypt it") {
		t.Errorf("gen config without a key: exit %d, stderr %q", r.code, r.err)
	}
	assertNoKey(t, r.err, id)

	// with it
	r = devata(t, map[string]string{render.EnvAgeKeyFile: keyFile}, "validate", "-i", inv)
	if r.code != 0 || !strings.Contains(r.stdout, "is valid: 5 machines") || strings.Contains(r.err, "throwaway") {
		t.Fatalf("validate with SOPS_AGE_KEY_FILE: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	out := filepath.Join(dir, "out")
	r = devata(t, map[string]string{render.EnvAgeKeyFile: keyFile}, "gen", "config", "-i", inv, "-o", out)
	if r.code != 0 || strings.Count(r.stdout, "wrote") != 6 {
		t.Fatalf("gen config with SOPS_AGE_KEY_FILE: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	// the configs carry the encrypted bundle's CA
	b, err := render.LoadSecretsWith(bundle, render.AgeIdentities{KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	cp1, err := os.ReadFile(filepath.Join(out, "cp-1.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cp1), b.Secrets.BootstrapToken) {
		t.Error("cp-1.yaml was not rendered from the encrypted bundle")
	}
}

func TestGenSecretsEncryptToRefusesAPrivateKey(t *testing.T) {
	inv := homelab(t)
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	r := devata(t, nil, "gen", "secrets", "-i", inv, "--encrypt-to", id.String())
	if r.code != exitUsage || !strings.Contains(r.err, "--encrypt-to: recipient 1 is an age identity (a private key)") {
		t.Errorf("exit %d, stderr %q", r.code, r.err)
	}
	assertNoKey(t, r.err+r.stdout, id)
	if _, err := os.Stat(filepath.Join(filepath.Dir(inv), "secrets.yaml")); !os.IsNotExist(err) {
		t.Errorf("a bundle was written: %v", err)
	}
}

func assertNoKey(t *testing.T, s string, id *age.X25519Identity) {
	t.Helper()
	if secret := id.String(); strings.Contains(s, secret[len("AGE-SECRET-KEY-1"):len("AGE-SECRET-KEY-1")+12]) {
		t.Errorf("output quotes the private key: %s", s)
	}
}
