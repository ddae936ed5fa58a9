package machines

import (
	"context"
	"errors"
	"slices"
	"strings"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
	"devata.dev/devata/redact"
	"devata.dev/devata/talosapi"
)

// CheckExtensions compares the booted image's system extensions and
// schematic with the inventory's.
const CheckExtensions = "extensions"

// WantBoot is what the inventory says a machine's installer puts on it.
type WantBoot struct {
	// Image is the machine's installer (inventory MachineInstallImage).
	Image string
	// SchematicID is the Image Factory schematic Image names; "" when
	// Image is not a Factory installer.
	SchematicID string
	// Known says Extensions and KernelArgs are known: the inventory
	// declares the schematic, or the installer is one that carries none
	// (ghcr.io's, the Factory's empty schematic). A custom installer's
	// are its own.
	Known bool
	// Extensions are the extensions by the name Talos reports them under,
	// sorted; KernelArgs the schematic's extra kernel arguments.
	Extensions, KernelArgs []string
}

// WantBootOf is m's WantBoot from inv.
func WantBootOf(inv *inventory.Inventory, m *inventory.Machine) WantBoot {
	w := WantBoot{Image: inv.MachineInstallImage(m)}
	w.SchematicID = talosapi.FactorySchematic(w.Image)
	s := inv.SchematicOf(m)
	switch {
	case s != nil && !inv.InstallImageGiven():
		w.Known = true
		w.Extensions = slices.Sorted(slices.Values(s.Extensions()))
		w.KernelArgs = s.Customization.ExtraKernelArgs
	case w.SchematicID == talos.EmptySchematicID, imageRepository(w.Image) == talos.GHCRInstaller:
		w.Known = true
	}
	return w
}

// bootKey holds a machine's WantBoot on its target.Target.
type bootKey struct{}

// wantBoot is the machine's WantBoot, from its inventory once per machine.
func wantBoot(t *target.Target) WantBoot {
	return target.Once(t, bootKey{}, func() WantBoot { return WantBootOf(t.Inventory, t.Machine) })
}

// imageRepository is image without its tag or digest.
func imageRepository(image string) string {
	image, _, _ = strings.Cut(image, "@")
	if i := strings.LastIndex(image, ":"); i > strings.LastIndex(image, "/") {
		image = image[:i]
	}
	return image
}

// empty says whether a schematic id stands for no extensions and no
// kernel arguments: none (an installer from elsewhere) or the empty
// schematic.
func emptySchematic(id string) bool { return id == "" || id == talos.EmptySchematicID }

// Matches says whether the booted image b is the one w wants: the same
// schematic (an installer without one and the empty schematic are alike),
// or, for a custom installer, anything (its contents are its own).
func (w WantBoot) Matches(b *talosapi.BootImage) bool {
	switch {
	case b.SchematicID == w.SchematicID, emptySchematic(b.SchematicID) && emptySchematic(w.SchematicID):
		return true
	case w.SchematicID == "" && !w.Known:
		return true
	}
	return false
}

// Dropped are the extensions b runs that w's installer does not carry;
// nil when w's are not known.
func (w WantBoot) Dropped(b *talosapi.BootImage) []string {
	if !w.Known {
		return nil
	}
	var out []string
	for _, e := range b.Extensions {
		if !slices.Contains(w.Extensions, e) {
			out = append(out, e)
		}
	}
	return out
}

// Added are the extensions w's installer carries that b does not run.
func (w WantBoot) Added(b *talosapi.BootImage) []string {
	var out []string
	for _, e := range w.Extensions {
		if !slices.Contains(b.Extensions, e) {
			out = append(out, e)
		}
	}
	return out
}

// describeBoot is a schematic and its extensions as reports print them.
func describeBoot(id string, extensions []string) string {
	s := "no schematic"
	switch {
	case id == talos.EmptySchematicID:
		s = "the empty schematic"
	case id != "":
		s = "schematic " + short8(id)
	}
	if len(extensions) == 0 {
		return s + ", no extensions"
	}
	return s + ", extensions " + strings.Join(extensions, ", ")
}

func short8(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// checkExtensions: the booted image's schematic and extensions
// (ExtensionStatus) against the inventory's schematic, and the schematic's
// kernel arguments on /proc/cmdline.
func checkExtensions(_ context.Context, t *target.Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, w, name := t.Obs, wantBoot(t), t.Machine.Name
	switch {
	case o.BootErr != nil:
		return []drift.Result{unknownRead(t, o.BootErr)}
	case o.Boot == nil:
		return []drift.Result{drift.Unknown(errors.New("its extensions were not read"), t.TalosctlFor("get extensions"))}
	}
	b := o.Boot
	evidence := []string{"ExtensionStatus: " + describeBoot(b.SchematicID, b.Extensions)}
	if !w.Known && w.SchematicID == "" {
		return []drift.Result{drift.InSync(append(evidence, "installer "+w.Image+" is not an Image Factory's: its extensions are its own, not declared")...)}
	}
	if !w.Matches(b) {
		desired := describeBoot(w.SchematicID, w.Extensions)
		if !w.Known {
			desired = describeBoot(w.SchematicID, nil) + " (extensions not declared: cluster.installImage names it)"
		}
		var changes []string
		for _, e := range w.Added(b) {
			changes = append(changes, "+ extension "+e)
		}
		dropped := w.Dropped(b)
		for _, e := range dropped {
			changes = append(changes, "- extension "+e)
		}
		next := "devata upgrade --machines " + name + " (installs " + w.Image + "; on the Talos it runs already, a reinstall and a reboot)"
		if len(dropped) > 0 {
			next = "devata upgrade --machines " + name + " --drop-extensions (installs " + w.Image + ", which removes " + strings.Join(dropped, ", ") + "), or add them to the inventory's schematic"
		}
		return []drift.Result{drift.Drifted("booted image's schematic is not the inventory's", desired, describeBoot(b.SchematicID, b.Extensions)).
			WithChanges(changes...).WithEvidence(evidence...).WithNext(next)}
	}
	var missing []string
	for _, arg := range w.KernelArgs {
		if !b.HasKernelArg(arg) {
			missing = append(missing, arg)
		}
	}
	if len(missing) > 0 {
		lacking := redact.Credentials(strings.Join(missing, " "))
		return []drift.Result{drift.Drifted("the schematic's kernel arguments are not on its command line: "+lacking, redact.Credentials(strings.Join(w.KernelArgs, " ")), "KernelCmdline lacks "+lacking).
			WithEvidence(append(evidence, "KernelCmdline: "+redact.Credentials(b.Cmdline))...).
			WithNext(t.TalosctlFor("get kernelcmdline") + "; a reinstall writes them back: devata upgrade --machines " + name)}
	}
	if len(w.KernelArgs) > 0 {
		evidence = append(evidence, "KernelCmdline has "+redact.Credentials(strings.Join(w.KernelArgs, " ")))
	}
	return []drift.Result{drift.InSync(evidence...)}
}
