package redact_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/redact"
)

// Secrets that machinery's RedactSecrets does not know about.
const extraSecretsPatch = `
machine:
  registries:
    config:
      registry.example.com:
        auth:
          username: robot
          password: hunter2-registry-password
  network:
    interfaces:
      - interface: wg0
        wireguard:
          privateKey: wg-private-key-value
          peers:
            - publicKey: wg-public-key
              endpoint: 192.0.2.1:51820
              allowedIPs: [10.1.0.0/24]
  systemDiskEncryption:
    state:
      provider: luks2
      keys:
        - static:
            passphrase: disk-passphrase-value
          slot: 0
cluster:
  inlineManifests:
    - name: creds
      contents: |
        apiVersion: v1
        kind: Secret
        stringData: {token: inline-manifest-secret}
`

// renderCP1 is the fixture's cp-1 config as devata renders it, and the
// fixture's bundle.
func renderCP1(t *testing.T) ([]byte, *secrets.Bundle) {
	t.Helper()
	_, b, configs := simtest.Rendered(t)
	return configs["cp-1"], b
}

func TestRedactConfigCoversWhatMachineryMisses(t *testing.T) {
	cfg, b := renderCP1(t)
	patched := simtest.Patch(t, cfg, extraSecretsPatch)
	red, hashes, err := redact.Config(patched)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(simtest.BundleSecrets(b), "hunter2-registry-password", "wg-private-key-value", "disk-passphrase-value", "inline-manifest-secret") {
		if bytes.Contains(red, []byte(s)) {
			t.Errorf("redacted config still holds %.12q…", s)
		}
	}
	for _, keep := range []string{"wg-public-key", "registry.example.com", "creds", "allowedIPs"} {
		if !bytes.Contains(red, []byte(keep)) {
			t.Errorf("redaction removed non-secret %q", keep)
		}
	}
	for _, suffix := range []string{
		"v1alpha1.machine.registries.config[\"registry.example.com\"].auth.password",
		"].wireguard.privateKey",
		"v1alpha1.cluster.inlineManifests[0].contents",
		"v1alpha1.cluster.ca.key",
		"static.passphrase",
	} {
		found := false
		for path := range hashes {
			found = found || strings.HasSuffix(path, suffix)
		}
		if !found {
			t.Errorf("no hash for secret *%s; have %v", suffix, keys(hashes))
		}
	}
	// A changed secret changes its hash and nothing else.
	changed := bytes.Replace(patched, []byte("hunter2-registry-password"), []byte("rotated-password"), 1)
	_, hashes2, err := redact.Config(changed)
	if err != nil {
		t.Fatal(err)
	}
	var diff []string
	for k, h := range hashes {
		if hashes2[k] != h {
			diff = append(diff, k)
		}
	}
	if len(diff) != 1 || !strings.HasSuffix(diff[0], "auth.password") {
		t.Errorf("changed secret paths %v, want only the registry password", diff)
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
