package machines_test

import (
	"context"
	"strings"
	"testing"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/talosapi"
)

// The upgrade hint names the inventory's installer image, an Image Factory
// schematic's included, not a hard-coded ghcr.io/siderolabs/installer
// (issue 17).
func TestUpgradeHintUsesTheInstallImage(t *testing.T) {
	const factory = "factory.talos.dev/installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba:v1.11.0"
	m := &inventory.Machine{Name: "worker-1", Address: "10.20.0.21"}
	for _, tc := range []struct{ image, want, wantNot string }{
		{factory, "upgrade --image " + factory, "ghcr.io/siderolabs/installer"},
		{"", "upgrade --image ghcr.io/siderolabs/installer:v1.11.0", ""},
		{"registry.lan/talos/installer:v1.10.6", "is tagged v1.10.6, not v1.11.0", ""},
	} {
		tg := machines.SetBoot(&target.Target{Machine: m, TalosVersion: "v1.11.0", Obs: &talosapi.Observation{Machine: m, Version: "v1.10.6"}}, machines.WantBoot{Image: tc.image})
		for _, c := range machines.Checks() {
			if c.Name != machines.CheckTalosVersion {
				continue
			}
			rs := c.Evaluate(context.Background(), m.Name, tg)
			if len(rs) != 1 || !strings.Contains(rs[0].Next, tc.want) || tc.wantNot != "" && strings.Contains(rs[0].Next, tc.wantNot) {
				t.Errorf("installImage %q: next %q, want it to contain %q", tc.image, rs[0].Next, tc.want)
			}
		}
	}
}
