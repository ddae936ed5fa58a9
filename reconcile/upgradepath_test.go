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
