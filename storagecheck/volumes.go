package storagecheck

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/drift"
)

// checkVolumes reports each expected volume's VolumeStatus: phase ready, the
// expected filesystem, at least minSize.
func checkVolumes(_ context.Context, t *view) []drift.Result {
	e := t.expectations()
	// unreachable: Unknown even when nothing is expected (an Unknown is
	// never reported as InSync)
	if r, ok := notObserved(t); ok {
		return []drift.Result{r}
	}
	if len(e.volumes) == 0 {
		ev := "no volumes expected"
		if !e.empty() {
			ev = "no volumes expected (mounts or raw disks only)"
		}
		return []drift.Result{drift.InSync(ev)}
	}
	var out []drift.Result
	for _, v := range e.volumes {
		out = append(out, t.volumeResult(v))
	}
	return out
}

// volumeResult is the result of one expected volume.
func (t *view) volumeResult(v *expectedVolume) drift.Result {
	o := t.Obs
	next := t.talosctl("get volumestatus " + v.id + " -o yaml")
	if o.VolumesErr != nil {
		return unknownRead(o.VolumesErr, next)
	}
	st, ok := o.Volumes[v.id]
	want := "ready, " + v.filesystem
	if v.minSize > 0 {
		want += ", ≥ " + size(v.minSize)
	}
	if !ok {
		reason := "Talos has no VolumeStatus " + v.id + " for " + v.label()
		return drift.Drifted(reason, want, "no VolumeStatus").
			WithEvidence("VolumeStatus IDs [" + strings.Join(sortedKeys(o.Volumes), " ") + "]").
			WithNext(t.talosctl("get volumeconfig "+v.id+" -o yaml") + " (is it declared? see " + CheckDeclaration + ")")
	}
	evidence := describeVolume(st)
	switch {
	case st.Phase == "waiting" || st.Phase == "failed":
		return t.volumeNotReady(v, st, o.Volumes).WithEvidence(evidence)
	case st.Phase != "ready":
		return drift.Drifted(v.id+" is "+st.Phase+", not ready", "ready", st.Phase).
			WithEvidence(evidence).WithNext(next)
	}
	return t.readyVolume(v, st, want, evidence, next)
}

// readyVolume is the result of a ready volume: the expected filesystem, at
// least minSize.
func (t *view) readyVolume(v *expectedVolume, st Volume, want, evidence, next string) drift.Result {
	var problems []string
	if st.Filesystem != v.filesystem {
		problems = append(problems, fmt.Sprintf("%s has filesystem %s, want %s", v.id, orNone(st.Filesystem), v.filesystem))
	}
	if v.minSize > 0 && st.Size < v.minSize {
		problems = append(problems, fmt.Sprintf("%s is %s, below minSize %s", v.id, size(st.Size), size(v.minSize)))
	}
	if len(problems) == 0 {
		return drift.InSync(evidence)
	}
	n := next
	// Talos v1.11 fails a volume whose partition has another filesystem
	// (format.go) rather than make it ready: this is for a node that says otherwise
	if st.Filesystem != v.filesystem {
		n += "; " + t.talosctl("get discoveredvolumes "+devName(st.Location)+" -o yaml") + " shows what formatted it; only if its data is disposable: " + t.talosctl("wipe disk "+devName(st.Location)+" --skip-volume-check")
	} else {
		// locate.go keeps a partition it finds at its size; grow.go grows it only with grow: true, into free space right after it
		n += "; " + t.talosctl("get discoveredvolumes "+devName(st.Location)+" -o yaml") + ": Talos keeps a partition it finds at the size it has (made before minSize was raised, or on a disk with no more room) and grows it only with grow: true; " + t.talosctl("get disks")
	}
	return drift.Drifted(strings.Join(problems, "; "), want, fmt.Sprintf("ready, %s, %s", orNone(st.Filesystem), size(st.Size))).WithEvidence(evidence).WithNext(n)
}

// Talos v1.11.0's messages for a volume it could not place or format
// (internal/app/machined/pkg/controllers/block/internal/volumes: locate.go
// LocateAndProvision, partition.go CreatePartition, format.go Format).
const (
	talosNoDiskFits = "no disks matched for volume (%d matched selector): %d have not enough space, %d have wrong format, %d have other issues"
	talosNoSpace    = "error creating partition: "
	talosFSMismatch = "filesystem type mismatch: "
)

// volumeNotReady explains a waiting or failed VolumeStatus: what Talos'
// volume manager (volume_manager.go and internal/volumes) was doing when it
// stopped, and what to look at; one case per way Talos stops.
func (t *view) volumeNotReady(v *expectedVolume, st Volume, all map[string]Volume) drift.Result {
	msg := st.ErrorMessage
	status := t.talosctl("get volumestatus " + v.id + " -o yaml")
	selector, fix := "", t.talosctl("get disks")+": no disk fits"
	if v.selector != "" {
		selector = fmt.Sprintf(" (diskSelector %q)", v.selector)
		fix += fmt.Sprintf(" diskSelector %q", v.selector)
	}
	if v.legacy {
		fix = t.talosctl("get disks") + ": is " + v.device + " there?"
	}
	waiting := st.Phase == "waiting" || st.PreFailPhase == "waiting"

	switch {
	case st.Phase == "waiting" && msg == "":
		// volume_manager.go: once a volume is not ready, the ones after it
		// that still need a partition wait, without a message
		return t.volumeWaitingBehind(v, all, selector, fix, status)
	case waiting:
		return t.volumeWaitingForDisk(v, msg, selector, fix, status)
	case strings.HasPrefix(msg, talosFSMismatch):
		// format.go: a partition with another filesystem is never reformatted
		return t.volumeFilesystemMismatch(v, st)
	}
	reason := v.id + " failed"
	if st.PreFailPhase != "" {
		reason += " after " + st.PreFailPhase
	}
	if msg != "" {
		reason += ": " + msg
	}
	return drift.Drifted(reason, "ready", "failed").WithNext(status + "; " + t.talosctl("dmesg"))
}

// volumeWaitingBehind explains a volume waiting without a message: behind
// the failed volumes Talos provisions before it, or for a disk.
func (t *view) volumeWaitingBehind(v *expectedVolume, all map[string]Volume, selector, fix, status string) drift.Result {
	e := t.expectations()
	var blockers []string
	for _, id := range sortedKeys(all) {
		if id == v.id || all[id].Phase != "failed" {
			continue
		}
		if o, ok := e.orderOf(id); ok && !o.before(v.order) {
			continue // Talos gets to that one after this one
		}
		blockers = append(blockers, id+" (failed)")
	}
	if len(blockers) == 0 {
		return drift.Drifted(v.id+" is waiting for a disk"+selector, "ready", "waiting").WithNext(fix + "; then " + status)
	}
	return drift.Drifted(fmt.Sprintf("%s is waiting behind %s: Talos provisions volumes one after another and starts none while one before it is not ready", v.id, strings.Join(blockers, ", ")), "ready", "waiting").WithNext("fix " + strings.Join(blockers, ", ") + " first (see its " + CheckVolumes + " result); then " + status)
}

// volumeWaitingForDisk explains a volume waiting (or failed while waiting)
// with Talos' message: why no disk fits, where the message says.
func (t *view) volumeWaitingForDisk(v *expectedVolume, msg, selector, fix, status string) drift.Result {
	reason := v.id + " is waiting for a disk"
	if msg != "" {
		reason += ": " + msg
	}
	reason += selector
	var matched, space, format, other int
	if _, err := fmt.Sscanf(msg, talosNoDiskFits, &matched, &space, &format, &other); err == nil {
		if hints, nexts := t.noDiskFits(space, format); len(nexts) > 0 {
			reason += ": " + strings.Join(hints, "; ")
			fix = strings.Join(nexts, "; ")
		}
	} else if strings.HasPrefix(msg, talosNoSpace) {
		reason += ": the disk Talos picked had too little room left once partitioned"
	}
	return drift.Drifted(reason, "ready", "waiting").WithNext(fix + "; then " + status)
}

// noDiskFits are the hints and next steps for the matched disks of
// talosNoDiskFits that had not enough space or the wrong format.
func (t *view) noDiskFits(space, format int) (hints, nexts []string) {
	if space > 0 {
		hints = append(hints, "a volume without maxSize takes all the free space of its disk, so the volumes before it may have taken these")
		nexts = append(nexts, t.talosctl("get volumestatus")+" shows which volumes took the matched disks: give them a maxSize, or point this diskSelector at a disk with room ("+t.talosctl("get disks")+")")
	}
	if format > 0 {
		hint, disk := "Talos partitions only blank or GPT disks, and a matched disk carries another signature", "<disk>"
		if signed := t.signedDisks(); len(signed) > 0 {
			hint += " (disks with one: " + strings.Join(signed, ", ") + ")"
			if len(signed) == 1 {
				disk, _, _ = strings.Cut(signed[0], " ")
			}
		}
		hints = append(hints, hint)
		nexts = append(nexts, t.talosctl("get discoveredvolumes")+" shows what is on the matched disks; only if its data is disposable: "+t.talosctl("wipe disk "+disk))
	}
	return hints, nexts
}

// volumeFilesystemMismatch explains a volume failed on talosFSMismatch.
func (t *view) volumeFilesystemMismatch(v *expectedVolume, st Volume) drift.Result {
	msg := st.ErrorMessage
	found, wanted, _ := strings.Cut(strings.TrimPrefix(msg, talosFSMismatch), " != ")
	dev := devName(st.Location)
	reason := fmt.Sprintf("%s failed: its partition %s already carries %s, the volume wants %s, and Talos does not reformat it (%q)", v.id, orNone(st.Location), found, wanted, msg)
	next := t.talosctl("get discoveredvolumes "+dev+" -o yaml") + " shows what is on it; "
	if !v.legacy && (found == "xfs" || found == "ext4") {
		next += "to keep its data, set the volume's filesystem to " + found + " and run devata apply --machines " + t.Machine.Name + "; "
	}
	next += "only if its data is disposable: " + t.talosctl("wipe disk "+dev+" --skip-volume-check") +
		" (" + v.id + " holds it, so a plain wipe is refused), then Talos formats it " + wanted
	return drift.Drifted(reason, "ready, "+v.filesystem, fmt.Sprintf("failed: %s on %s", found, orNone(st.Location))).WithNext(next)
}

// signedDisks are the disks whose DiscoveredVolume shows a signature other
// than a GPT ("sdb bluestore"): those Talos will not partition.
func (t *view) signedDisks() []string {
	var out []string
	for _, dv := range t.Obs.Discovered {
		if dv.Type == "disk" && dv.Signature != "" && dv.Signature != "gpt" {
			out = append(out, dv.ID+" "+dv.Signature)
		}
	}
	slices.Sort(out)
	return out
}

func describeVolume(v Volume) string {
	s := "VolumeStatus " + v.ID + " " + v.Phase
	if v.PreFailPhase != "" {
		s += " (was " + v.PreFailPhase + ")"
	}
	if v.Filesystem != "" {
		s += ", " + v.Filesystem
	}
	if v.Size > 0 {
		s += ", " + size(v.Size)
	}
	if v.Location != "" {
		s += " on " + v.Location
	}
	if v.ErrorMessage != "" {
		s += ": " + v.ErrorMessage
	}
	return s
}
