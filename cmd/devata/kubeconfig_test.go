package main

import (
	"os"
	"path/filepath"
	"testing"

	"devata.dev/devata/config"
	"devata.dev/devata/inventory"
)

// drift and apply use the kubeconfig devata bootstrap wrote next to the
// inventory when none is given (issue 17: it was written and then not
// used); a given one wins.
func TestTheKubeconfigBootstrapWroteIsUsed(t *testing.T) {
	dir := t.TempDir()
	inv := &inventory.Inventory{Path: filepath.Join(dir, "inventory.yaml")}
	a := &app{log: newLogger(os.Stderr, config.Settings{})}
	if got := a.kubeconfigFor(inv); got != "" {
		t.Errorf("no kubeconfig anywhere: got %q", got)
	}
	written := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(written, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := a.kubeconfigFor(inv); got != written {
		t.Errorf("bootstrap's kubeconfig next to the inventory: got %q, want %q", got, written)
	}
	a.settings.Kubeconfig = "/elsewhere/kubeconfig"
	if got := a.kubeconfigFor(inv); got != "/elsewhere/kubeconfig" {
		t.Errorf("--kubeconfig given: got %q", got)
	}
}
