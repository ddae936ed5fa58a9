package storagecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/cel"
	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
)

// checkRawDisks reports, per rawDisks entry, that its selector matches enough
// disks and that none of them carries a partition or a signature other than
// those allowed.
func checkRawDisks(_ context.Context, t *view) []drift.Result {
	e := t.expectations()
	// unreachable: Unknown even when nothing is expected (an Unknown is
	// never reported as InSync)
	if r, ok := notObserved(t); ok {
		return []drift.Result{r}
	}
	if len(e.rawDisks) == 0 {
		ev := noneExpected
		if !e.empty() {
			ev = "no raw disks expected"
		}
		return []drift.Result{drift.InSync(ev)}
	}
	next := t.talosctl("get disks -o yaml") + "; " + t.talosctl("get discoveredvolumes")
	var out []drift.Result
	for _, rd := range e.rawDisks {
		out = append(out, t.rawDiskResult(rd, next))
	}
	return out
}

// rawDiskResult is the result of one rawDisks entry, one fact after the
// other; next is what to look at for the disks.
func (t *view) rawDiskResult(rd inventory.RawDisk, next string) drift.Result {
	o := t.Obs
	what := fmt.Sprintf("rawDisks %q", rd.Selector)
	switch {
	case !o.DisksRead:
		return drift.Unknown(errors.New(what+": disks were not read"), next)
	case o.DisksErr != nil:
		return unknownRead(o.DisksErr, next)
	case o.DiscoveredErr != nil:
		return unknownRead(o.DiscoveredErr, next)
	}
	expr, err := parseSelector(rd.Selector)
	if err != nil {
		return drift.Unknown(fmt.Errorf("%s: %w", what, err), "fix the selector in the inventory")
	}
	matched, err := t.matchDisks(expr, what)
	if err != nil {
		return drift.Unknown(err, next)
	}
	var ids []string
	for _, d := range matched {
		ids = append(ids, d.Spec.GetDevPath())
	}
	f := &rawDiskFacts{evidence: []string{fmt.Sprintf("selector matches %d of %d disks [%s]", len(matched), len(o.Disks), strings.Join(ids, " "))}}
	want := fmt.Sprintf("≥ %d blank disks", rd.MinCount)
	if len(matched) < rd.MinCount {
		f.problems = append(f.problems, fmt.Sprintf("the selector matches %d disks, want at least %d", len(matched), rd.MinCount))
		f.actual = append(f.actual, fmt.Sprintf("%d disks", len(matched)))
	}
	for _, d := range matched {
		t.rawDisk(rd, d, f)
	}
	if len(f.problems) == 0 {
		return drift.InSync(f.evidence...)
	}
	nextFix := next
	if f.fix != "" {
		nextFix = f.fix
	}
	if len(matched) < rd.MinCount {
		nextFix = next + ": which disks does " + fmt.Sprintf("%q", rd.Selector) + " miss?"
	}
	return drift.Drifted(what+": "+strings.Join(f.problems, "; "), want, strings.Join(f.actual, ", ")).
		WithEvidence(f.evidence...).WithNext(nextFix)
}

// matchDisks are the disks, CD-ROMs aside, that the selector matches.
func (t *view) matchDisks(expr cel.Expression, what string) ([]Disk, error) {
	o := t.Obs
	var matched []Disk
	for _, d := range o.Disks {
		if d.Spec.GetCdrom() {
			continue
		}
		vars := map[string]any{"disk": d.Spec}
		if o.SystemDisk != "" {
			vars["system_disk"] = d.ID == o.SystemDisk
		}
		ok, err := expr.EvalBool(celenv.DiskLocator(), vars)
		if err != nil {
			return nil, fmt.Errorf("%s on disk %s: %w", what, d.ID, err)
		}
		if ok {
			matched = append(matched, d)
		}
	}
	return matched, nil
}

// rawDiskFacts is what rawDiskResult gathers about the matched disks.
type rawDiskFacts struct {
	problems, actual, evidence []string
	// fix is the next step for the first matched disk that is not blank.
	fix string
}

// rawDisk checks that a matched disk is not the system disk and carries no
// partition and no signature but those allowed.
func (t *view) rawDisk(rd inventory.RawDisk, d Disk, f *rawDiskFacts) {
	dev := d.Spec.GetDevPath()
	if d.ID == t.Obs.SystemDisk {
		f.problems = append(f.problems, dev+" is the system disk")
		return
	}
	sig, parts, seen := t.discovered(dev)
	switch {
	case len(parts) > 0:
		f.problems = append(f.problems, fmt.Sprintf("%s has partitions [%s]", dev, strings.Join(parts, " ")))
		f.actual = append(f.actual, dev+" partitioned")
	case !seen:
		f.problems = append(f.problems, dev+" has no DiscoveredVolume: Talos has not probed it")
	case sig != "" && !slices.Contains(rd.AllowSignatures, sig):
		f.problems = append(f.problems, fmt.Sprintf("%s carries a leftover %s signature", dev, sig))
		f.actual = append(f.actual, dev+" "+sig)
	default:
		state := "blank"
		if sig != "" {
			state = sig + " (allowed)"
		}
		f.evidence = append(f.evidence, fmt.Sprintf("DiscoveredVolume %s: %s", devName(dev), state))
		return
	}
	ev := fmt.Sprintf("DiscoveredVolume %s: %s", devName(dev), orNone(sig))
	if len(parts) > 0 {
		ev += ", partitions [" + strings.Join(parts, " ") + "]"
	}
	f.evidence = append(f.evidence, ev)
	if f.fix == "" {
		f.fix = t.talosctl("get discoveredvolumes -o yaml") + " shows what is on " + dev + "; only if its data is disposable: " + t.talosctl("wipe disk "+devName(dev))
	}
}

// discovered is what the DiscoveredVolumes say of a disk: its signature, its
// partitions (sorted) and whether Talos probed it at all.
func (t *view) discovered(dev string) (sig string, parts []string, seen bool) {
	for _, dv := range t.Obs.Discovered {
		switch {
		case dv.DevPath == dev && dv.Type == "disk":
			sig, seen = dv.Signature, true
		case dv.ParentDevPath == dev && dv.Type == "partition":
			parts = append(parts, dv.DevPath)
		}
	}
	slices.Sort(parts)
	return sig, parts, seen
}
