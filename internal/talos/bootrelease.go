package talos

import "fmt"

// Reported is the Talos version one machine reported.
type Reported struct {
	Machine, Version string
}

// BootRelease is the Talos version a machine in maintenance mode is
// configured for, and why (devata bootstrap and a join by devata apply
// both use it): the release it booted, own, as it reported it; its config
// must be one that release parses, since Talos refuses a document kind or
// field of a newer release (configloader). When own could not be read
// (unread says why, "" when nothing did), the oldest release another
// machine reported (others), else fallback (fallbackWhy says where it came
// from, such as a snapshot's sidecar), else target, the inventory's
// cluster.talosVersion.
func BootRelease(own, unread string, others []Reported, fallback, fallbackWhy, target string) (version, why string) {
	if own != "" {
		return own, "it boots " + own
	}
	cannot := "its Talos version could not be read"
	if unread != "" {
		cannot += " (" + unread + ")"
	}
	oldest, by := "", ""
	for _, o := range others {
		vm, ok := Minor(o.Version)
		if !ok {
			continue
		}
		if om, _ := Minor(oldest); oldest == "" || vm < om {
			oldest, by = o.Version, o.Machine
		}
	}
	switch {
	case oldest != "":
		return oldest, fmt.Sprintf("%s; the oldest release another machine runs: %s runs %s", cannot, by, oldest)
	case fallback != "":
		return fallback, fmt.Sprintf("%s; %s: %s", cannot, fallbackWhy, fallback)
	}
	return target, fmt.Sprintf("%s and no other machine said its own; cluster.talosVersion %s", cannot, target)
}

// ContractOf is the config contract ("1.13") a config for a machine
// running version follows: the release's minor, target's (the inventory's
// cluster.talosVersion) when version is newer, unknown or unsupported.
func ContractOf(version, target string) string {
	vm, ok := Minor(version)
	tm, tok := Minor(target)
	switch {
	case ok && tok && vm < tm && vm >= OldestMinor:
		return fmt.Sprintf("1.%d", vm)
	case tok:
		return fmt.Sprintf("1.%d", tm)
	}
	if len(target) > 0 && target[0] == 'v' {
		return target[1:]
	}
	return target
}
