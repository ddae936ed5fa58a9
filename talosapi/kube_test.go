package talosapi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/talosapi"
)

// first names a current context that only second defines; second's own
// current context must lose to it, as kubectl merges KUBECONFIG=first:second.
const (
	firstKubeconfig = `apiVersion: v1
kind: Config
current-context: lab
clusters:
- name: home
  cluster: {server: "https://home.example:6443"}
users:
- name: me
  user: {token: first}
contexts:
- name: home
  context: {cluster: home, user: me}
`
	secondKubeconfig = `apiVersion: v1
kind: Config
current-context: home
clusters:
- name: lab
  cluster: {server: "https://lab.example:6443"}
- name: home
  cluster: {server: "https://second-home.example:6443"}
users:
- name: me
  user: {token: second}
contexts:
- name: lab
  context: {cluster: lab, user: me}
- name: home
  context: {cluster: home, user: me}
`
)

func TestKubeConfigList(t *testing.T) {
	dir := t.TempDir()
	first := writeKubeconfig(t, dir, "first", firstKubeconfig)
	second := writeKubeconfig(t, dir, "second", secondKubeconfig)
	missing := filepath.Join(dir, "missing")
	list := func(paths ...string) string { return strings.Join(paths, string(filepath.ListSeparator)) }

	for _, tc := range []struct {
		name, kubeconfig, host, token string
	}{
		// first's current-context (lab) is defined in second; user "me" is first's
		{"list", list(first, second), "https://lab.example:6443", "first"},
		{"reversed", list(second, first), "https://second-home.example:6443", "second"},
		{"missing file in a list is skipped", list(missing, second), "https://second-home.example:6443", "second"},
		{"one file", second, "https://second-home.example:6443", "second"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := talosapi.KubeConfig(tc.kubeconfig)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Host != tc.host || cfg.BearerToken != tc.token {
				t.Errorf("host %s, token %s; want %s, %s", cfg.Host, cfg.BearerToken, tc.host, tc.token)
			}
		})
	}

	// one file must exist, as --kubeconfig's file must for kubectl
	if _, err := talosapi.KubeConfig(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing single kubeconfig: %v", err)
	}
	// first alone names a context it does not define
	if _, err := talosapi.KubeConfig(first); err == nil || !strings.Contains(err.Error(), "context was not found for specified context: lab") {
		t.Errorf("first alone: %v, want the undefined context named", err)
	}
}

func writeKubeconfig(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
