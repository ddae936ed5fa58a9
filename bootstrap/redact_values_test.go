package bootstrap_test

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/bootstrap"
)

// CredentialsPatch puts credentials where Talos has no secret field for
// them (issue 15, probe 9): proxy settings in machine.env, URL userinfo in
// mirrors, manifests and log endpoints, registry auth, manifest headers.
const credentialsPatch = `
machine:
  env:
    https_proxy: http://admin:s3cret-env@proxy.lan:3128
    GODEBUG: env-plain-value-secret
  registries:
    mirrors:
      docker.io:
        endpoints:
          - https://mirror-user:s3cret-mirror@mirror.lan:5000
    config:
      registry.lan:
        auth:
          username: registry-user-secret
          password: s3cret-registry-password
          auth: czNjcmV0LWF1dGgtYmxvYg==
          identityToken: s3cret-identity-token
  logging:
    destinations:
      - endpoint: tcp://log-user:s3cret-log@logs.lan:5044
        format: json_lines
cluster:
  extraManifests:
    - https://gh-user:s3cret-manifest@manifests.lan/cni.yaml
  extraManifestHeaders:
    Authorization: Bearer s3cret-header-token
`

const credentialsDocs = `---
apiVersion: v1alpha1
kind: SideroLinkConfig
apiUrl: https://siderolink.lan:8099/?jointoken=s3cret-join-token
---
apiVersion: v1alpha1
kind: ExtensionServiceConfig
name: proxy-agent
environment:
  - HTTPS_PROXY=http://admin:s3cret-extension@proxy.lan:3128
`

// CredentialSecrets are the secret strings of credentialsPatch and credentialsDocs.
var credentialSecrets = []string{
	"s3cret-env", "env-plain-value-secret", "mirror-user", "s3cret-mirror",
	"registry-user-secret", "s3cret-registry-password", "czNjcmV0LWF1dGgtYmxvYg==", "s3cret-identity-token",
	"log-user", "s3cret-log", "gh-user", "s3cret-manifest", "s3cret-header-token",
	"s3cret-join-token", "s3cret-extension",
}

func credentialsConfig(t *testing.T) []byte {
	t.Helper()
	cfg, _ := renderCP1(t)
	return append(patchBytes(t, cfg, credentialsPatch), credentialsDocs...)
}

func TestRedactConfigValuesAndURLCredentials(t *testing.T) {
	cfg := credentialsConfig(t)
	for _, s := range credentialSecrets {
		if !bytes.Contains(cfg, []byte(s)) {
			t.Fatalf("the test config lacks %q: the test would prove nothing", s)
		}
	}
	red, hashes, err := bootstrap.RedactConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range credentialSecrets {
		if bytes.Contains(red, []byte(s)) {
			t.Errorf("redacted config holds %q", s)
		}
	}
	for _, keep := range []string{
		"https_proxy: '******'", "GODEBUG:", "https://******@mirror.lan:5000", "tcp://******@logs.lan:5044",
		"https://******@manifests.lan/cni.yaml", "Authorization:", "registry.lan", "siderolink.lan:8099",
		"HTTPS_PROXY=******", "proxy-agent",
	} {
		if !bytes.Contains(red, []byte(keep)) {
			t.Errorf("redacted config lacks %q:\n%s", keep, red)
		}
	}
	// Each secret changes its hash and nothing else: a diff says which one
	// changed without showing either value.
	for _, c := range []struct{ secret, path string }{
		{"s3cret-env", "v1alpha1.machine.env.https_proxy"},
		{"s3cret-mirror", `v1alpha1.machine.registries.mirrors["docker.io"].endpoints[0]`},
		{"s3cret-registry-password", `v1alpha1.machine.registries.config["registry.lan"].auth.password`},
		{"s3cret-identity-token", `v1alpha1.machine.registries.config["registry.lan"].auth.identityToken`},
		{"s3cret-log", "v1alpha1.machine.logging.destinations[0].endpoint"},
		{"s3cret-manifest", "v1alpha1.cluster.extraManifests[0]"},
		{"s3cret-header-token", "v1alpha1.cluster.extraManifestHeaders.Authorization"},
		{"s3cret-join-token", "SideroLinkConfig.apiUrl"},
		{"s3cret-extension", "ExtensionServiceConfig/proxy-agent.environment[0].HTTPS_PROXY"},
	} {
		t.Run(c.path, func(t *testing.T) {
			rotated := bytes.Replace(cfg, []byte(c.secret), []byte("rotated-value"), 1)
			red2, hashes2, err := bootstrap.RedactConfig(rotated)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(red, red2) {
				t.Errorf("redacted configs differ: the marker must not depend on the secret")
			}
			var changed []string
			for k, h := range hashes {
				if hashes2[k] != h {
					changed = append(changed, k)
				}
			}
			if !slices.Equal(changed, []string{c.path}) {
				t.Errorf("changed secret paths %v, want [%s]; have %v", changed, c.path, keys(hashes))
			}
			for _, p := range changed {
				if strings.Contains(p, c.secret) {
					t.Errorf("path %q holds the secret", p)
				}
			}
		})
	}
}
