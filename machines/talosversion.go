package machines

import (
	"context"
	"strings"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
)

func checkTalosVersion(_ context.Context, t *target.Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	got := t.Obs.Version
	if got == t.TalosVersion {
		return []drift.Result{drift.InSync("Version tag " + got)}
	}
	return []drift.Result{drift.Drifted("Talos version differs from cluster.talosVersion", t.TalosVersion, got).
		WithEvidence("Version tag " + got).
		WithNext(upgradeHint(t))}
}

// upgradeHint is the next step of a Talos version that differs: talosctl
// upgrade with the inventory's installer image (cluster.installImage, which
// carries an Image Factory schematic when one is used), or the image's own
// tag when it is not the desired version.
func upgradeHint(t *target.Target) string {
	image := wantBoot(t).Image
	if image == "" {
		image = "ghcr.io/siderolabs/installer:" + t.TalosVersion
	}
	hint := "upgrade: " + t.TalosctlFor("upgrade --image "+image) + " (or fix cluster.talosVersion)"
	if ref, tag, ok := strings.Cut(image[strings.LastIndex(image, "/")+1:], ":"); ok && !strings.Contains(tag, "@") && tag != t.TalosVersion {
		hint += "; cluster.installImage " + image + " is tagged " + tag + ", not " + t.TalosVersion + ": set it to the " + ref + " image of " + t.TalosVersion
	}
	return hint
}
