package redact_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/redact"
)

// CredentialsPatch puts credentials where Talos has no secret field for
// them (issue 15, probe 9): proxy settings in machine.env, URL userinfo in
// mirrors, manifests and log endpoints, credentials in URL queries
// (a pre-signed manifest URL, a config URL's token), registry auth,
// manifest headers.
const credentialsPatch = `
machine:
  install:
    extraKernelArgs:
      - talos.config=https://cfg.lan/config?node=cp-1&token=s3cret-query-token
  env:
    https_proxy: http://admin:s3cret-env@proxy.lan:3128
    AWS_SECRET_ACCESS_KEY: env-s3cret-aws
    GITHUB_TOKEN: env-s3cret-token
    DB_PASSWORD: env-s3cret-password
    api-key: env-s3cret-apikey
    PROXY_AUTH: env-s3cret-auth
    TZ: Europe/Berlin
    GODEBUG: http2debug=1
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
    - https://s3.lan/bucket/cilium.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAs3cretcred%2F20250101&X-Amz-Expires=3600&X-Amz-Signature=s3cret-amz-signature
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
	"s3cret-env", "env-s3cret-aws", "env-s3cret-token", "env-s3cret-password", "env-s3cret-apikey", "env-s3cret-auth", "mirror-user", "s3cret-mirror",
	"registry-user-secret", "s3cret-registry-password", "czNjcmV0LWF1dGgtYmxvYg==", "s3cret-identity-token",
	"log-user", "s3cret-log", "gh-user", "s3cret-manifest", "s3cret-header-token",
	"s3cret-join-token", "s3cret-extension",
	"s3cret-query-token", "AKIAs3cretcred", "s3cret-amz-signature",
}

func credentialsConfig(t *testing.T) []byte {
	t.Helper()
	cfg, _ := renderCP1(t)
	return append(simtest.Patch(t, cfg, credentialsPatch), credentialsDocs...)
}

func TestRedactConfigValuesAndURLCredentials(t *testing.T) {
	cfg := credentialsConfig(t)
	for _, s := range credentialSecrets {
		if !bytes.Contains(cfg, []byte(s)) {
			t.Fatalf("the test config lacks %q: the test would prove nothing", s)
		}
	}
	red, hashes, err := redact.Config(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range credentialSecrets {
		if bytes.Contains(red, []byte(s)) {
			t.Errorf("redacted config holds %q", s)
		}
	}
	for _, keep := range []string{
		// machine.env by credential shape: a time zone is no secret (issue 33)
		"https_proxy: http://******@proxy.lan:3128", "TZ: Europe/Berlin", "GODEBUG: http2debug=1",
		"AWS_SECRET_ACCESS_KEY: '******'", "GITHUB_TOKEN: '******'", "DB_PASSWORD: '******'", "api-key: '******'", "PROXY_AUTH: '******'", "https://******@mirror.lan:5000", "tcp://******@logs.lan:5044",
		"https://******@manifests.lan/cni.yaml", "Authorization:", "registry.lan", "siderolink.lan:8099",
		"HTTPS_PROXY=******", "proxy-agent", "https://siderolink.lan:8099/?jointoken=******",
		"talos.config=https://cfg.lan/config?node=cp-1&token=******",
		"https://s3.lan/bucket/cilium.yaml?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=******&X-Amz-Expires=3600&X-Amz-Signature=******",
	} {
		if !bytes.Contains(red, []byte(keep)) {
			t.Errorf("redacted config lacks %q:\n%s", keep, red)
		}
	}
	// Each secret changes its hash and nothing else: a diff says which one
	// changed without showing either value.
	for _, c := range []struct{ secret, path string }{
		{"s3cret-env", "v1alpha1.machine.env.https_proxy"},
		{"env-s3cret-aws", "v1alpha1.machine.env.AWS_SECRET_ACCESS_KEY"},
		{"env-s3cret-token", "v1alpha1.machine.env.GITHUB_TOKEN"},
		{"s3cret-mirror", `v1alpha1.machine.registries.mirrors["docker.io"].endpoints[0]`},
		{"s3cret-registry-password", `v1alpha1.machine.registries.config["registry.lan"].auth.password`},
		{"s3cret-identity-token", `v1alpha1.machine.registries.config["registry.lan"].auth.identityToken`},
		{"s3cret-log", "v1alpha1.machine.logging.destinations[0].endpoint"},
		{"s3cret-manifest", "v1alpha1.cluster.extraManifests[0]"},
		{"s3cret-header-token", "v1alpha1.cluster.extraManifestHeaders.Authorization"},
		{"s3cret-join-token", "SideroLinkConfig.apiUrl"},
		{"s3cret-query-token", "v1alpha1.machine.install.extraKernelArgs[0]"},
		{"AKIAs3cretcred", "v1alpha1.cluster.extraManifests[1]"},
		{"s3cret-amz-signature", "v1alpha1.cluster.extraManifests[1]"},
		{"s3cret-extension", "ExtensionServiceConfig/proxy-agent.environment[0].HTTPS_PROXY"},
	} {
		t.Run(c.path, func(t *testing.T) {
			rotated := bytes.Replace(cfg, []byte(c.secret), []byte("rotated-value"), 1)
			red2, hashes2, err := redact.Config(rotated)
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

// Talos' answers to an apply quote the config (issue 15): machinery's
// validation errors quote values, the decoder dumps what it did not know,
// and a change that cannot be applied without a reboot comes back with an
// unredacted diff of the running config against the new one. Each text
// below has Talos' shape and holds secrets; what Scrub leaves holds none of
// them and still says what failed.
func TestScrubTalosErrorText(t *testing.T) {
	cfg, b := renderCP1(t)
	cfg = append(simtest.Patch(t, simtest.Patch(t, cfg, credentialsPatch), extraSecretsPatch), credentialsDocs...)
	scrub := redact.NewScrubber(cfg)

	pem := string(b.Certs.OS.Key)
	b64 := base64.StdEncoding.EncodeToString(b.Certs.OS.Key)
	for _, c := range []struct {
		name, text string
		secrets    []string // beyond every secret of the config
		keep       []string
	}{
		{
			name: "a validation error quoting a value",
			text: "rpc error: code = InvalidArgument desc = 2 errors occurred:\n\t* wrong key \"wg-private-key-value\" length: 20\n\t* invalid registry mirror endpoint \"https://mirror-user:s3cret-mirror@mirror.lan:5000\"\n\n",
			keep: []string{"InvalidArgument", "2 errors occurred", `wrong key "******" length: 20`, "mirror.lan:5000"},
		},
		{
			name: "quoted as %q, multi-line and base64-decoded",
			text: fmt.Sprintf("manifest %q is invalid; key %q; ca %s; header %q", "apiVersion: v1\nkind: Secret\nstringData: {token: inline-manifest-secret}\n", pem, b64, "Bearer s3cret-header-token"),
			keep: []string{"manifest", "is invalid", "header"},
		},
		{
			name:    "the running config's secrets in a no-reboot diff",
			text:    "this config change can't be applied in immediate mode\ndiff:\n--- a\n+++ b\n@@ -1,3 +1,3 @@\n   env:\n-    https_proxy: http://admin:0ld-proxy-pass@proxy.lan:3128\n+    https_proxy: http://admin:s3cret-env@proxy.lan:3128\n-    password: 0ld-registry-password\n",
			secrets: []string{"0ld-proxy-pass", "0ld-registry-password"},
			keep:    []string{"this config change can't be applied in immediate mode", "immediate mode (Talos' diff not shown"},
		},
		{
			name:    "the decoder's dump of unknown keys",
			text:    "rpc error: code = InvalidArgument desc = unknown keys found during decoding:\nmachine:\n    registries:\n        config:\n            registry.lan:\n                auth:\n                    passwrod: 0ld-typo-password\n",
			secrets: []string{"0ld-typo-password"},
			keep:    []string{"unknown keys machine.registries.config.registry.lan.auth.passwrod"},
		},
		{
			name:    "credentials in URLs that are not in the config",
			text:    "failed to fetch https://other:0ld-userinfo@manifests.lan/x.yaml and https://s3.lan/y?X-Amz-Signature=0ld-signature&X-Amz-Expires=60",
			secrets: []string{"0ld-userinfo", "0ld-signature"},
			keep:    []string{"https://******@manifests.lan/x.yaml", "X-Amz-Signature=******&X-Amz-Expires=60"},
		},
		{
			name: "the bundle's and machinery's secrets, raw",
			text: "unexpected: " + strings.Join(append(simtest.BundleSecrets(b), "s3cret-join-token", "s3cret-query-token", "AKIAs3cretcred/20250101"), " | "),
			keep: []string{"unexpected: "},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := scrub.Scrub(c.text)
			all := append(append(slices.Clone(credentialSecrets), simtest.BundleSecrets(b)...), "wg-private-key-value", "disk-passphrase-value", "inline-manifest-secret", "hunter2-registry-password", b64)
			for _, s := range append(all, c.secrets...) {
				if strings.Contains(got, s) {
					t.Errorf("scrubbed text holds %.16q…:\n%s", s, got)
				}
			}
			for _, k := range c.keep {
				if !strings.Contains(got, k) {
					t.Errorf("scrubbed text lacks %q:\n%s", k, got)
				}
			}
		})
	}

	// nothing secret: the text stays as Talos wrote it
	plain := `rpc error: code = InvalidArgument desc = 1 error occurred:` + "\n\t* unknown machine type \"router\"\n\n"
	if got := scrub.Scrub(plain); got != plain {
		t.Errorf("Scrub changed a text without secrets:\n%q\n%q", plain, got)
	}
}

// A config that does not load (a running config from a newer Talos, with
// fields this machinery does not know) fails Config with the
// decoder's error, which dumps the unknown part of the document, values
// included: the error names the keys only.
func TestRedactConfigErrorQuotesNoValues(t *testing.T) {
	cfg, _ := renderCP1(t)
	newer := bytes.Replace(cfg, []byte("machine:\n"), []byte("machine:\n    futureAuth:\n        password: s3cret-future-password\n"), 1)
	_, _, err := redact.Config(newer)
	if err == nil {
		t.Fatal("a config with an unknown field loaded: the test would prove nothing")
	}
	if strings.Contains(err.Error(), "s3cret-future-password") {
		t.Errorf("error quotes the value:\n%v", err)
	}
	if !strings.Contains(err.Error(), "unknown keys machine.futureAuth.password") {
		t.Errorf("error does not name the unknown key:\n%v", err)
	}
}
