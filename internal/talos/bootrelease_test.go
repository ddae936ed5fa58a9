package talos

import (
	"strings"
	"testing"
)

// The release a machine in maintenance mode is configured for: its own
// when read, else the oldest another machine reported, else the fallback,
// else the inventory's; and the contract each version's config follows.
func TestBootRelease(t *testing.T) {
	others := []Reported{{"cp-1", "v1.14.1"}, {"cp-2", "v1.13.9"}, {"cp-3", "garbage"}}
	for _, tc := range []struct {
		name, own, fallback, want, why string
		others                         []Reported
	}{
		{"own", "v1.12.4", "v1.11.0", "v1.12.4", "it boots v1.12.4", others},
		{"oldest other", "", "v1.11.0", "v1.13.9", "could not be read (no Version); the oldest release another machine runs: cp-2 runs v1.13.9", others},
		{"fallback", "", "v1.11.0", "v1.11.0", "the sidecar: v1.11.0", nil},
		{"target", "", "", "v1.14.1", "no other machine said its own; cluster.talosVersion v1.14.1", nil},
	} {
		got, why := BootRelease(tc.own, "no Version", tc.others, tc.fallback, "the sidecar", "v1.14.1")
		if got != tc.want || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %s (%s), want %s (%s)", tc.name, got, why, tc.want, tc.why)
		}
	}
	for v, want := range map[string]string{"v1.13.9": "1.13", "v1.14.1": "1.14", "v1.15.0": "1.14", "v1.10.0": "1.14", "": "1.14"} {
		if got := ContractOf(v, "v1.14.1"); got != want {
			t.Errorf("ContractOf(%q): %s, want %s", v, got, want)
		}
	}
}
