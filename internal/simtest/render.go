package simtest

import (
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/examples"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
)

// Rendered is the homelab example with the fixture bundle and each
// machine's config as devata renders it, by name, for tests that need the
// configs but no fleet.
func Rendered(tb testing.TB) (*inventory.Inventory, *secrets.Bundle, map[string][]byte) {
	tb.Helper()
	path, err := examples.WriteHomelab(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	inv, err := inventory.Load(path)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := render.LoadSecrets(FixtureSecrets())
	if err != nil {
		tb.Fatal(err)
	}
	out, err := render.Render(inv, b)
	if err != nil {
		tb.Fatal(err)
	}
	configs := make(map[string][]byte, len(out))
	for _, r := range out {
		configs[r.Machine] = r.Config
	}
	return inv, b, configs
}
