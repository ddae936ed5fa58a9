package simtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/examples"
)

// LargeInventory writes an inventory of one control plane and n workers,
// beside the homelab example's patches, and returns its path. Every
// worker gets workerPatch when it is not empty (e.g. patches/worker.yaml).
func LargeInventory(tb testing.TB, n int, workerPatch string) string {
	tb.Helper()
	dir := tb.TempDir()
	if _, err := examples.WriteHomelab(dir); err != nil {
		tb.Fatal(err)
	}
	patches := ""
	if workerPatch != "" {
		patches = ", patches: [" + workerPatch + "]"
	}
	var inv strings.Builder
	inv.WriteString("apiVersion: devata.dev/v1alpha1\nkind: Inventory\ncluster: {name: lab, endpoint: 'https://10.0.0.10:6443', patches: [patches/common.yaml]}\nmachines:\n")
	inv.WriteString("  - {name: cp-1, role: controlplane, address: 10.0.0.11, installDisk: /dev/sda}\n")
	for i := range n {
		fmt.Fprintf(&inv, "  - {name: w-%d, role: worker, address: 10.%d.%d.%d, installDisk: /dev/sda%s}\n", i, 1+i>>16, i>>8&255, i&255, patches)
	}
	path := filepath.Join(dir, "large.yaml")
	if err := os.WriteFile(path, []byte(inv.String()), 0o600); err != nil {
		tb.Fatal(err)
	}
	return path
}
