package render_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"devata.dev/devata/render"
)

// tampered writes fixture name changed by edit to a temporary file.
func tampered(t *testing.T, name string, edit func([]byte) []byte) (string, []byte) {
	t.Helper()
	src := readFile(t, filepath.Join(encDir, name))
	out := edit(bytes.Clone(src))
	if bytes.Equal(out, src) {
		t.Fatalf("edit of %s changed nothing", name)
	}
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, src
}

var valueRE = func(key string) *regexp.Regexp { return regexp.MustCompile(`(?m)^(\s+` + key + `: )(\S+)$`) }

// swap exchanges the values of two keys (first occurrence of each).
func swap(a, b string) func([]byte) []byte {
	return func(data []byte) []byte {
		va, vb := string(valueRE(a).FindSubmatch(data)[2]), string(valueRE(b).FindSubmatch(data)[2])
		s := strings.Replace(string(data), va, "\x00", 1)
		s = strings.Replace(s, vb, va, 1)
		return []byte(strings.Replace(s, "\x00", vb, 1))
	}
}

// sops' integrity holds: a value moved to another key, a changed clear
// value, a changed MAC or a damaged data key are refused as damage, with
// the line or field and what to do, quoting nothing.
func TestSOPSTamperingIsRefused(t *testing.T) {
	clear := readFile(t, clearFixture)
	for _, tc := range []struct {
		name, fixture string
		edit          func([]byte) []byte
		want          string
	}{
		{"value moved to another key", "talosctl-secrets.sops.yaml", swap("id", "secret"),
			"the value at line 2 (cluster.id) does not verify (changed, moved to another key, or damaged): restore the file from Git, or edit it only with `sops`"},
		{"clear certificate changed", "talosctl-secrets.regex.sops.yaml",
			func(b []byte) []byte { return bytes.Replace(b, []byte("crt: LS0t"), []byte("crt: LS0u"), 1) },
			"its MAC does not verify: the file was changed without sops, or damaged"},
		{"value removed", "talosctl-secrets.sops.yaml",
			func(b []byte) []byte { return valueRE("token").ReplaceAll(b, []byte("${1}null")) },
			"its MAC does not verify"},
		{"MAC changed", "talosctl-secrets.sops.yaml",
			func(b []byte) []byte {
				return bytes.Replace(b, []byte("mac: ENC[AES256_GCM,data:B"), []byte("mac: ENC[AES256_GCM,data:C"), 1)
			},
			"its MAC does not verify"},
		{"lastmodified changed", "talosctl-secrets.sops.yaml",
			func(b []byte) []byte {
				return regexp.MustCompile(`lastmodified: "2026`).ReplaceAll(b, []byte(`lastmodified: "2027`))
			},
			"its MAC does not verify"},
		{"data key damaged", "talosctl-secrets.sops.yaml",
			func(b []byte) []byte {
				return bytes.Replace(b, []byte("-----BEGIN AGE ENCRYPTED FILE-----\n            YWdl"), []byte("-----BEGIN AGE ENCRYPTED FILE-----\n            YXdl"), 1)
			},
			"none of its sops.age[].enc data keys parses or verifies (damaged): restore it from Git or your backup"},
		{"value not encrypted", "talosctl-secrets.sops.yaml",
			func(b []byte) []byte { return valueRE("token").ReplaceAll(b, []byte("${1}plain-text")) },
			"the value at line 8 (trustdinfo.token) is not sops-encrypted (ENC[AES256_GCM,…])"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path, src := tampered(t, tc.fixture, tc.edit)
			_, err := render.LoadSecretsWith(path, testOnlyKeys())
			var de *render.DecryptError
			if !errors.As(err, &de) || de.NoIdentity || de.Format != render.FormatSOPS {
				t.Fatalf("err %v, want a sops DecryptError for damage", err)
			}
			if !strings.Contains(err.Error(), path+" is sops-encrypted: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error lacks %q: %v", tc.want, err)
			}
			assertQuotesNothing(t, strings.ReplaceAll(err.Error(), path, "PATH"), src, clear, []byte(testOnlySecret(t)))
		})
	}
}

// With mac_only_encrypted the MAC covers only the encrypted values, as in
// sops: a changed clear value passes, a changed encrypted one does not.
func TestSOPSMACOnlyEncrypted(t *testing.T) {
	path, _ := tampered(t, "talosctl-secrets.maconly.sops.yaml", swap("id", "secret"))
	if _, err := render.LoadSecretsWith(path, testOnlyKeys()); err == nil || !strings.Contains(err.Error(), "(cluster.id) does not verify") {
		t.Errorf("moved encrypted value: %v", err)
	}
	// the flag itself is under the MAC's initialisation: dropping it fails
	path, _ = tampered(t, "talosctl-secrets.maconly.sops.yaml", func(b []byte) []byte {
		return bytes.Replace(b, []byte("    mac_only_encrypted: true\n"), nil, 1)
	})
	if _, err := render.LoadSecretsWith(path, testOnlyKeys()); err == nil || !strings.Contains(err.Error(), "its MAC does not verify") {
		t.Errorf("mac_only_encrypted dropped: %v", err)
	}
}

func TestSOPSUnsupportedKeyLayouts(t *testing.T) {
	_, err := render.LoadSecretsWith(filepath.Join(encDir, "talosctl-secrets.shamir.sops.yaml"), testOnlyKeys())
	if err == nil || !strings.Contains(err.Error(), "splits its data key over 2 key groups (Shamir), which devata does not combine: re-encrypt it with one group of age recipients") {
		t.Errorf("shamir: %v", err)
	}
	path, _ := tampered(t, "talosctl-secrets.sops.yaml", func(b []byte) []byte {
		return bytes.Replace(b, []byte("\nsops:\n    age:\n"), []byte("\nsops:\n    pgp:\n"), 1)
	})
	_, err = render.LoadSecretsWith(path, testOnlyKeys())
	if err == nil || !strings.Contains(err.Error(), "wrapped only for key services other than age") || !strings.Contains(err.Error(), "sops updatekeys") {
		t.Errorf("pgp only: %v", err)
	}
	path, _ = tampered(t, "talosctl-secrets.sops.yaml", func(b []byte) []byte {
		return bytes.Replace(b, []byte("    unencrypted_suffix: _unencrypted\n"), []byte("    unencrypted_suffix: _unencrypted\n    encrypted_comment_regex: x\n"), 1)
	})
	if _, err := render.LoadSecretsWith(path, testOnlyKeys()); err == nil || !strings.Contains(err.Error(), "comment rules") {
		t.Errorf("comment rules: %v", err)
	}
}

// A key named sops inside a clear bundle is not sops metadata.
func TestClearBundleIsNotTakenForSOPS(t *testing.T) {
	data := readFile(t, clearFixture)
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, append(data, []byte("sops: not-metadata\n")...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := render.LoadSecretsWith(path, render.AgeIdentities{}); err != nil {
		t.Errorf("clear bundle with a sops key: %v", err)
	}
}

// Probes 4 and 5 of issue 31. A sops file nested 9,990 deep took 4.7 s and
// 990 MB before its MAC was checked (the key path was copied at each
// level): it is refused, nested deeper than any bundle, before anything
// walks it, in bounded memory. A clear document put before a sops one was
// used as the bundle (only the first document was read; sops refuses the
// file, "metadata not found"): a file of several documents is refused. A
// clear bundle is refused when an age identity is given: a bundle meant to
// be encrypted is not.
func TestHostileBundlesAreRefused(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}

	deep := strings.Repeat("{a: ", 9990) + "'ENC[AES256_GCM,data:eA==,iv:eA==,tag:eHh4eHh4eHh4eHh4eHh4eA==,type:str]'" + strings.Repeat("}", 9990)
	deepPath := write("deep.yaml", []byte("x: "+deep+"\nsops:\n  mac: ENC[x]\n  lastmodified: \"2026-12-05T00:00:00Z\"\n  age: []\n"))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := render.LoadSecretsWith(deepPath, testOnlyKeys())
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), "nests more than 32 levels deep") {
		t.Errorf("a sops file nested 9,990 deep: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 256<<20 {
		t.Errorf("refusing it allocated %d MiB", alloc>>20)
	}

	clear := readFile(t, clearFixture)
	sopsFile := readFile(t, filepath.Join(encDir, "talosctl-secrets.sops.yaml"))
	first := write("plaintext-first.yaml", append(append(bytes.Clone(clear), []byte("---\n")...), sopsFile...))
	if _, err := render.LoadSecretsWith(first, testOnlyKeys()); err == nil || !strings.Contains(err.Error(), "holds 2 YAML documents") || strings.Contains(err.Error(), "LS0t") {
		t.Errorf("a clear document before a sops one: %v", err)
	}

	plain := write("secrets.yaml", clear)
	if _, err := render.LoadSecretsWith(plain, render.AgeIdentities{}); err != nil {
		t.Fatalf("a clear bundle without an identity: %v", err)
	}
	keys := write("keys.txt", readFile(t, testOnlyKeyFile))
	_, err = render.LoadSecretsWith(plain, render.AgeIdentities{Files: []string{keys}})
	if err == nil || !strings.Contains(err.Error(), "it is in clear text, though an age identity is given (age identity file "+keys+")") {
		t.Errorf("a clear bundle with --age-identity: %v", err)
	}
	// an identity setting pointing at a Secret that is not mounted (deploy/'s optional one) is no identity
	if _, err := render.LoadSecretsWith(plain, render.AgeIdentities{Files: []string{filepath.Join(dir, "absent", "keys.txt")}}); err != nil {
		t.Errorf("a clear bundle with the identity setting naming no file: %v", err)
	}
}
