package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"filippo.io/age"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/render"
)

// ageKeyFile writes a fresh age identity to dir/name (0600).
func ageKeyFile(t *testing.T, dir, name string) (*age.X25519Identity, string) {
	t.Helper()
	id, err := age.GenerateX25519Identity()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("# test only\n"+id.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id, path
}

// Every command that loads the bundle opens an age-encrypted one with
// --age-identity, DEVATA_AGE_IDENTITY or age-identity in the settings file
// (relative to it), and while that is set it reads no sops variable: a
// SOPS_AGE_KEY_FILE naming a wrong key is not used, and an identity file
// that does not open the bundle fails, naming the bundle, the file and the
// setting, quoting no key.
func TestAgeIdentityOpensTheBundleForEveryCommand(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	keys := t.TempDir()
	right, rightFile := ageKeyFile(t, keys, "right.txt")
	wrong, wrongFile := ageKeyFile(t, keys, "wrong.txt")
	to, err := render.ParseAgeRecipients([]string{right.Recipient().String()})
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(sf.Dir, "secrets.yaml")
	if err := render.WriteSecretsEncrypted(bundle, sf.Bundle, to, true); err != nil {
		t.Fatal(err)
	}
	// the sops variables name the wrong key: with the setting they are not read
	sops := map[string]string{render.EnvAgeKeyFile: wrongFile}
	with := func(extra map[string]string) map[string]string {
		env := map[string]string{}
		for k, v := range sops {
			env[k] = v
		}
		for k, v := range extra {
			env[k] = v
		}
		return env
	}
	commands := map[string]struct {
		args []string
		code int // opened: 1 for plan, whose kubeconfig step is pending
		fail int // not opened: 1 for validate (invalid), 2 for the others
	}{
		"validate":         {[]string{"validate"}, 0, 1},
		"gen config":       {[]string{"gen", "config", "-o", filepath.Join(t.TempDir(), "out")}, 0, 2},
		"plan":             {[]string{"plan", "--skip-nodes"}, 1, 2},
		"drift":            {[]string{"drift", machineChecks}, 0, 2},
		"apply --dry-run":  {[]string{"apply", "--dry-run"}, 0, 2},
		"reconcile --once": {[]string{"reconcile", "--once", "--report-only", machineChecks}, 0, 2},
	}
	for name, c := range commands {
		args := append(c.args, "--config", sf.settings)
		r := devata(t, sops, append(args, "--age-identity", wrongFile, "--age-identity", rightFile)...)
		if r.code != c.code || strings.Contains(r.err, "encrypted") {
			t.Errorf("%s --age-identity (a wrong, then the right file): exit %d\n%s%s", name, r.code, r.stdout, r.err)
		}
		r = devata(t, sops, args...)
		if r.code != c.fail || !strings.Contains(r.err, bundle+" is age-encrypted: it does not open with the 1 age identity from SOPS_AGE_KEY_FILE ("+wrongFile+")") {
			t.Errorf("%s with SOPS_AGE_KEY_FILE naming the wrong key: exit %d, want %d and the bundle and key file named\n%s", name, r.code, c.fail, r.err)
		}
		r = devata(t, map[string]string{render.EnvAgeKeyFile: rightFile}, append(args, "--age-identity", wrongFile)...)
		if r.code != c.fail || !strings.Contains(r.err, bundle+" is age-encrypted: it does not open with the 1 age identity from age identity file "+wrongFile) || !strings.Contains(r.err, "are not read while it is set") {
			t.Errorf("%s --age-identity WRONG with the right SOPS_AGE_KEY_FILE: exit %d, want %d, naming the file and saying the variables are not read\n%s", name, r.code, c.fail, r.err)
		}
		for _, id := range []*age.X25519Identity{right, wrong} {
			assertNoKey(t, r.stdout+r.err, id)
		}
	}

	// DEVATA_AGE_IDENTITY, a path list
	r := devata(t, with(map[string]string{"DEVATA_AGE_IDENTITY": wrongFile + string(filepath.ListSeparator) + rightFile}), "drift", "--config", sf.settings, machineChecks)
	if r.code != 0 {
		t.Errorf("drift with DEVATA_AGE_IDENTITY: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	// age-identity in the settings file, relative to it
	settings, err := os.ReadFile(sf.settings)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(sf.settings)
	if err := os.WriteFile(filepath.Join(dir, "age.txt"), []byte(right.String()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	withKey := filepath.Join(dir, "with-key.yaml")
	if err := os.WriteFile(withKey, append(settings, []byte("\nage-identity: age.txt\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = devata(t, sops, "drift", "--config", withKey, machineChecks)
	if r.code != 0 {
		t.Errorf("drift with age-identity in the settings file: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	// a missing identity file says which, and what to do
	missing := filepath.Join(keys, "typo.txt")
	r = devata(t, nil, "drift", "--config", sf.settings, machineChecks, "--age-identity", missing)
	if r.code != 2 || !strings.Contains(r.err, "age identity file "+missing+" cannot be read (no such file or directory): point --age-identity") {
		t.Errorf("drift --age-identity MISSING: exit %d\n%s", r.code, r.err)
	}
}
