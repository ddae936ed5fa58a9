package reconcile

import (
	"strings"
	"testing"
)

func TestUpgradePath(t *testing.T) {
	for _, tt := range []struct {
		from, to, refused string
	}{
		{"v1.10.6", "v1.11.0", ""},
		{"v1.11.0", "v1.11.3", ""},
		{"v1.10.0", "v1.10.0", ""},
		{"v1.11.0", "v1.10.6", "a downgrade from v1.11.0 to v1.10.6: Talos goes back with talosctl rollback"},
		{"v1.11.2", "v1.11.1", "a downgrade"},
		{"v1.9.5", "v1.11.0", "a jump from v1.9.5 to v1.11.0: Talos upgrades one minor release at a time; set cluster.talosVersion to the latest v1.10 patch"},
		{"v1.11.0", "v2.0.0", "a jump"},
		{"v1.11.0-alpha.1", "v1.11.0", ""},
		{"latest", "v1.11.0", `reports Talos "latest", not a version`},
		{"v1.11.0", "one-eleven", `cluster.talosVersion "one-eleven" is not a version`},
	} {
		err := UpgradePath(tt.from, tt.to)
		switch {
		case tt.refused == "" && err != nil:
			t.Errorf("%s → %s refused: %v", tt.from, tt.to, err)
		case tt.refused != "" && (err == nil || !strings.Contains(err.Error(), tt.refused)):
			t.Errorf("%s → %s: %v, want %q", tt.from, tt.to, err, tt.refused)
		}
	}
}

// An upgrade across more than one minor release stops on the newest patch
// of each minor in between (talos.Releases Latest), from the same installer
// repository: the same Image Factory schematic, or ghcr.io's.
func TestNextHop(t *testing.T) {
	const factory = "factory.talos.dev/metal-installer/376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba"
	for _, tt := range []struct {
		from, to, image, hop, hopImage string
	}{
		{"v1.12.4", "v1.14.1", factory + ":v1.14.1", "v1.13.9", factory + ":v1.13.9"},
		{"v1.11.0", "v1.13.9", "ghcr.io/siderolabs/installer:v1.13.9", "v1.12.4", "ghcr.io/siderolabs/installer:v1.12.4"},
		{"v1.11.0", "v1.14.1", "registry.local:5000/talos/installer:v1.14.1", "v1.12.4", "registry.local:5000/talos/installer:v1.12.4"},
		{"v1.13.9", "v1.14.1", factory + ":v1.14.1", "", ""},                       // one minor: no hop
		{"v1.14.1", "v1.12.4", factory + ":v1.12.4", "", ""},                       // a downgrade
		{"v1.12.4", "v1.14.1", "ghcr.io/siderolabs/installer@sha256:0123", "", ""}, // a digest pins v1.14.1 only
		{"v1.12.4", "v1.14.1", "registry.local:5000/talos/installer", "", ""},      // no tag
		{"v1.14.1", "v1.16.0", factory + ":v1.16.0", "", ""},                       // no 1.15 known
	} {
		hop, img, ok := nextHop(tt.from, tt.to, tt.image)
		if hop != tt.hop || img != tt.hopImage || ok != (tt.hop != "") {
			t.Errorf("nextHop(%s, %s, %s) = %s, %s, %t; want %s, %s", tt.from, tt.to, tt.image, hop, img, ok, tt.hop, tt.hopImage)
		}
	}
}
