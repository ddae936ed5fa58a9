package main

import (
	"bytes"
	"html"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/sim"
)

// credentialsCommon is the homelab's common patch with credentials where
// Talos has no secret field for them (issue 15, probe 9), and extraArgs
// whose names alone say they are credentials (issue 31, probe 6).
const credentialsCommon = `machine:
  time:
    servers:
      - time.cloudflare.com
  sysctls:
    net.core.bpf_jit_harden: "1"
  env:
    https_proxy: http://admin:s3cret-env@proxy.lan:3128
  kubelet:
    extraArgs:
      basic-auth-password: s3cret-flag-password
      oidc-client-secret: s3cret-flag-oidc
      client_secret: s3cret-flag-client
      api-token: s3cret-flag-token
      X-Api-Key: s3cret-flag-apikey
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
cluster:
  extraManifests:
    - https://gh-user:s3cret-manifest@manifests.lan/cni.yaml
    - https://s3.lan/bucket/cilium.yaml?X-Amz-Credential=AKIAs3cretcred&X-Amz-Expires=3600&X-Amz-Signature=s3cret-amz-signature
  extraManifestHeaders:
    Authorization: Bearer s3cret-header-token
`

// Every output of drift (each format, the stream, the JUnit, HTML and Prometheus
// files), plan, apply --dry-run, apply and reconcile --once is searched for
// the credentials on both sides of a diff: the ones the desired config adds
// and the older ones cp-2 runs with.
func TestNoOutputLeaksCredentialsOutsideSecretFields(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	if err := os.WriteFile(filepath.Join(sf.Dir, "patches", "common.yaml"), []byte(credentialsCommon), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	if r := devata(t, nil, "gen", "config", "-i", filepath.Join(sf.Dir, "inventory.yaml"), "-o", out); r.code != 0 {
		t.Fatalf("gen config: exit %d\n%s", r.code, r.err)
	}
	desired, err := os.ReadFile(filepath.Join(out, "cp-2.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	secrets := []string{
		"s3cret-env", "mirror-user", "s3cret-mirror", "registry-user-secret", "s3cret-registry-password",
		"czNjcmV0LWF1dGgtYmxvYg==", "s3cret-identity-token", "gh-user", "s3cret-manifest", "s3cret-header-token",
		"AKIAs3cretcred", "s3cret-amz-signature",
		"s3cret-flag-password", "s3cret-flag-oidc", "s3cret-flag-client", "s3cret-flag-token", "s3cret-flag-apikey",
	}
	for _, s := range secrets {
		if !bytes.Contains(desired, []byte(s)) {
			t.Fatalf("rendered config lacks %q: the test would prove nothing", s)
		}
	}
	// cp-2 runs the same credentials, older: each shows as a changed secret.
	old := bytes.ReplaceAll(desired, []byte("s3cret"), []byte("0ldpass"))
	old = bytes.ReplaceAll(old, []byte("-user"), []byte("-olduser"))
	secrets = append(secrets, "0ldpass", "-olduser")
	// and its mirror moved: a change by path whose both sides hold a
	// credential, redacted, in every format that lists changes
	old = bytes.ReplaceAll(old, []byte("@mirror.lan:5000"), []byte("@mirror-old.lan:5000"))
	change := `machine.registries.mirrors["docker.io"].endpoints[0]: "https://******@mirror-old.lan:5000" → "https://******@mirror.lan:5000"`
	changeShown := func(what, out string) {
		t.Helper()
		if !strings.Contains(html.UnescapeString(out), change) {
			t.Errorf("%s does not list the change\n%s\nin:\n%s", what, change, out)
		}
	}
	sf.Sim.Machine("cp-2").SetFaults(sim.Faults{DriftedConfig: old})

	dir := t.TempDir()
	junit, prom, page := filepath.Join(dir, "drift.xml"), filepath.Join(dir, "drift.prom"), filepath.Join(dir, "drift.html")
	var everything bytes.Buffer
	record := func(what string, r result) {
		t.Helper()
		if r.code != 0 && r.code != 1 && r.code != 2 {
			t.Fatalf("%s: exit %d\n%s", what, r.code, r.err)
		}
		everything.WriteString(r.stdout + r.err)
	}
	for _, format := range []string{"table", "json", "junit", "prom", "html"} {
		r := devata(t, nil, "drift", "--config", sf.settings, "-o", format, "-vv", "--log-format", "json", "--junit-file", junit, "--prom-file", prom, "--html-file", page)
		record("drift -o "+format, r)
		if format != "prom" && format != "json" { // JSON quotes the line: its changes are decoded in changes_test.go
			changeShown("drift -o "+format, r.stdout)
		}
		for _, f := range []string{junit, prom, page} {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			everything.Write(data)
			if f != prom {
				changeShown(f, string(data))
			}
		}
	}
	record("drift --stream", devata(t, nil, "drift", "--config", sf.settings, "-o", "json", "--stream"))
	for _, format := range []string{"text", "json", "markdown"} {
		r := devata(t, nil, "plan", "--config", sf.settings, "-o", format)
		record("plan -o "+format, r)
		if format != "json" {
			changeShown("plan -o "+format, r.stdout)
		}
	}
	dryRun := devata(t, nil, "apply", "--dry-run", "--config", sf.settings, "-vv", "--log-format", "json")
	record("apply --dry-run", dryRun)
	changeShown("apply --dry-run", dryRun.stdout)
	// no-reboot cannot apply a machine.env change: Talos refuses with an
	// unredacted diff of both configs, which must not come through
	noReboot := devata(t, nil, "apply", "--dry-run", "--mode", "no-reboot", "--config", sf.settings, "-vv", "--log-format", "json")
	if !strings.Contains(noReboot.stdout+noReboot.err, "can't be applied in immediate mode") {
		t.Errorf("apply --dry-run --mode no-reboot does not show Talos' refusal:\n%s%s", noReboot.stdout, noReboot.err)
	}
	record("apply --dry-run --mode no-reboot", noReboot)
	record("reconcile --once --dry-run --mode no-reboot", devata(t, nil, "reconcile", "--once", "--dry-run", "--mode", "no-reboot", "--config", sf.settings, "--audit-log", filepath.Join(dir, "audit.jsonl"), "-vv"))
	record("reconcile --once --dry-run", devata(t, nil, "reconcile", "--once", "--dry-run", "--config", sf.settings, "--audit-log", filepath.Join(dir, "audit.jsonl"), "-vv"))
	record("apply --yes", devata(t, nil, "apply", "--yes", "--config", sf.settings, "-vv", "--log-format", "json"))
	record("reconcile --once", devata(t, nil, "reconcile", "--once", "--config", sf.settings, "--audit-log", filepath.Join(dir, "audit.jsonl"), "-vv"))
	audit, err := os.ReadFile(filepath.Join(dir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	everything.Write(audit)

	// The page escapes = and + in attributes: search its text as a browser reads it, too.
	all := everything.String() + html.UnescapeString(everything.String())
	for _, want := range []string{
		"dry run: nothing was written", "converged: cp-1, cp-2", "https_proxy", "mirror.lan:5000", "https://******@mirror.lan:5000", "manifests.lan/cni.yaml",
		"v1alpha1.machine.env.https_proxy", `registries.config["registry.lan"].auth.password`, "extraManifestHeaders.Authorization",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("output lacks %q: the non-secret part must stay readable", want)
		}
	}
	for _, s := range append(secrets, simtest.BundleSecrets(sf.Bundle)...) {
		if strings.Contains(all, s) {
			i := strings.Index(all, s)
			t.Errorf("output contains secret %.12q…: %q", s, all[max(0, i-80):min(len(all), i+40)])
		}
	}
}

// Probe 7 of issue 31: --junit-file, --html-file and --prom-file pointed at
// a symbolic link (to the secrets bundle) or a device replaced it. Each is
// refused before any machine is asked, and the bundle and /dev/null are
// left as they were.
func TestReportFilesReplaceOnlyRegularFiles(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	bundle := sf.Inventory.SecretsPath()
	before, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "drift.xml")
	if err := os.Symlink(bundle, link); err != nil {
		t.Fatal(err)
	}
	versions := func() int { return sf.Sim.Machine("cp-1").Calls("Version") }
	calls := versions()
	for _, flag := range []string{"--junit-file", "--html-file", "--prom-file"} {
		for _, path := range []string{link, "/dev/null"} {
			r := devata(t, nil, "drift", "--config", sf.settings, flag, path)
			if r.code != 2 || !strings.Contains(r.err, "devata replaces only regular files") {
				t.Errorf("drift %s %s: exit %d\n%s", flag, path, r.code, r.err)
			}
		}
	}
	if n := versions() - calls; n != 0 {
		t.Errorf("%d Version calls reached cp-1 before the refusals", n)
	}
	if after, err := os.ReadFile(bundle); err != nil || !bytes.Equal(after, before) {
		t.Errorf("the bundle changed (%v)", err)
	}
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v, %v", fi, err)
	}
}

// Probe 8 of issue 31: text from outside reaches the terminal escaped,
// whichever message carries it (internal/termsafe wraps devata's output).
// Here the inventory's own path, quoted raw by the error that names it.
func TestOutputEscapesTerminalSequences(t *testing.T) {
	evil := filepath.Join(t.TempDir(), "inv\x1b]0;pwned\x07\rfake.yaml")
	r := devata(t, nil, "validate", "-i", evil)
	if r.code == 0 || strings.ContainsAny(r.stdout+r.err, "\x1b\x07\r") || !strings.Contains(r.err, `inv\x1b]0;pwned\x07\x0dfake.yaml`) {
		t.Errorf("exit %d, output %q", r.code, r.stdout+r.err)
	}
}

// machine.env is redacted by the credential shape of each variable's name:
// a time zone changed on a machine reads as that change, a token beside it
// as one secret changed, its value nowhere (issue 33: every env value was
// redacted and a TZ change read "1 secret changed").
func TestMachineEnvRedactedByCredentialShape(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	drifted := simtest.Patch(t, sf.Desired["worker-1"], "machine:\n  env:\n    TZ: Europe/Berlin\n    GITHUB_TOKEN: s3cret-env-token\n")
	sf.Sim.Machine("worker-1").SetFaults(sim.Faults{DriftedConfig: drifted})
	r := devata(t, nil, "apply", "--config", sf.settings, "--dry-run")
	if r.code != 1 {
		t.Fatalf("apply --dry-run: exit %d, want 1\n%s%s", r.code, r.stdout, r.err)
	}
	out := r.stdout + r.err
	lacks(t, "apply --dry-run", out, "-        TZ: Europe/Berlin", "-        GITHUB_TOKEN: '******'", "1 secret changed (v1alpha1.machine.env.GITHUB_TOKEN)")
	if strings.Contains(out, "s3cret-env-token") || strings.Contains(out, "machine.env.TZ)") {
		t.Errorf("the token shows, or TZ is counted as a secret:\n%s", out)
	}
}
