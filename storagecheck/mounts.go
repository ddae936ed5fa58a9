package storagecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/drift"
)

// checkMounts reports, per expected volume and per inventory mount, Talos'
// MountStatus (target, filesystem, read-write), the Mounts API's capacity and,
// where kubeletMount is set, the KubeletSpec's extraMount (rshared, rw|ro).
func checkMounts(_ context.Context, t *view) []drift.Result {
	e := t.expectations()
	// unreachable: Unknown even when nothing is expected (an Unknown is
	// never reported as InSync)
	if r, ok := notObserved(t); ok {
		return []drift.Result{r}
	}
	if len(e.volumes) == 0 && len(e.mounts) == 0 {
		ev := noneExpected
		if !e.empty() {
			ev = "no mounts expected (raw disks only)"
		}
		return []drift.Result{drift.InSync(ev)}
	}
	var out []drift.Result
	for _, v := range e.volumes {
		out = append(out, t.mountResult(mountExpectation{
			target: v.target, filesystem: v.filesystem, readWrite: true, volumeID: v.id, kubelet: v.kubeletMount, what: v.label(),
		}))
	}
	for _, m := range e.mounts {
		me := mountExpectation{target: m.Path, filesystem: m.Filesystem, readWrite: m.ReadWrite == nil || *m.ReadWrite, what: "mount " + m.Path, inventory: true}
		if m.MinSize != "" {
			me.minSize = parseSize(m.MinSize)
		}
		out = append(out, t.mountResult(me))
	}
	return out
}

type mountExpectation struct {
	target, filesystem string
	readWrite          bool
	minSize            uint64
	volumeID           string // empty for inventory mounts
	kubelet            string // rw or ro: the kubelet must see it
	what               string
	inventory          bool // an inventory mount: it may not be a Talos volume
}

// roViaTalos says whether the kubelet sees the mount read-only through
// Talos' own bind mount of userVolumesRoot, with no extraMount needed.
func (me mountExpectation) roViaTalos() bool {
	return me.kubelet == "ro" && underUserVolumes(me.target)
}

// want is the desired text of the mount's result.
func (me mountExpectation) want() string {
	want := me.target
	if me.filesystem != "" {
		want += " " + me.filesystem
	}
	want += " " + rwText(me.readWrite)
	switch {
	case me.roViaTalos():
		want += ", kubelet ro (Talos' /var/mnt mount or an extraMount with rshared,ro)"
	case me.kubelet != "":
		want += ", kubelet bind,rshared," + me.kubelet
	}
	return want
}

// mountFacts is what mountResult gathers about one expected mount, one fact
// after the other.
type mountFacts struct {
	t  *view
	o  *Observation
	me mountExpectation
	// statusNext is what to look at for the MountStatus (and VolumeStatus).
	statusNext string

	problems         drift.Findings
	evidence, actual []string
	unknown          []error
}

// mountResult is the result of one expected mount.
func (t *view) mountResult(me mountExpectation) drift.Result {
	f := &mountFacts{t: t, o: t.Obs, me: me, statusNext: t.talosctl("get mountstatus")}
	if me.volumeID != "" {
		f.statusNext = t.talosctl("get volumestatus "+me.volumeID+" -o yaml") + "; " + f.statusNext
	}
	mnt := f.mountStatus()
	use := f.usage()
	f.mounted(mnt, use)
	f.capacity(use)
	if me.kubelet != "" {
		f.kubeletMount()
	}
	return f.result()
}

// mountStatus is the MountStatus that targets the mount, nil when none does
// or they could not be read.
func (f *mountFacts) mountStatus() *Mount {
	if f.o.MountsErr != nil {
		f.unknown = append(f.unknown, f.o.MountsErr)
		return nil
	}
	for i := range f.o.Mounts {
		if f.o.Mounts[i].Target == f.me.target {
			return &f.o.Mounts[i]
		}
	}
	return nil
}

// usage is the last line of the Mounts API for the mount, nil when none is or
// it could not be read.
func (f *mountFacts) usage() *Usage {
	if f.o.UsageErr != nil {
		f.unknown = append(f.unknown, f.o.UsageErr)
		return nil
	}
	var use *Usage
	for i := range f.o.Usage {
		if f.o.Usage[i].Target == f.me.target {
			use = &f.o.Usage[i]
		}
	}
	return use
}

// mounted compares what is mounted at the target with the expectation.
func (f *mountFacts) mounted(mnt *Mount, use *Usage) {
	me := f.me
	switch {
	case mnt != nil:
		f.mountedByTalos(mnt, use)
	case f.o.MountsErr != nil:
	case me.inventory && use != nil:
		// not a Talos volume (or not one Talos tracks): the kernel's table is all there is
		f.evidence = append(f.evidence, "no MountStatus targets "+me.target+": filesystem and read-write are not verified")
		f.actual = append(f.actual, me.target+" mounted")
		if me.filesystem != "" {
			f.unknown = append(f.unknown, fmt.Errorf("%s is mounted but Talos has no MountStatus for it: its filesystem cannot be verified", me.target))
		}
	default:
		reason := "nothing is mounted at " + me.target
		if st, ok := f.o.Volumes[me.volumeID]; ok && me.volumeID != "" && st.Phase != "ready" {
			reason += " (VolumeStatus " + me.volumeID + " is " + st.Phase + ": see " + CheckVolumes + ")"
		}
		f.actual = append(f.actual, "not mounted")
		f.problems.Problem(reason, f.statusNext)
	}
}

// mountedByTalos compares the MountStatus of the target with the expectation.
func (f *mountFacts) mountedByTalos(mnt *Mount, use *Usage) {
	me := f.me
	f.evidence = append(f.evidence, fmt.Sprintf("MountStatus %s: %s on %s %s %s", mnt.ID, mnt.Source, mnt.Target, orNone(mnt.Filesystem), rwText(!mnt.ReadOnly)))
	f.actual = append(f.actual, fmt.Sprintf("%s %s %s", mnt.Target, orNone(mnt.Filesystem), rwText(!mnt.ReadOnly)))
	if me.filesystem != "" && mnt.Filesystem != me.filesystem {
		f.problems.Problem(fmt.Sprintf("%s is mounted %s, want %s", me.target, orNone(mnt.Filesystem), me.filesystem), f.statusNext)
	}
	if mnt.ReadOnly == me.readWrite {
		f.problems.Problem(fmt.Sprintf("%s is mounted %s, want %s", me.target, rwText(!mnt.ReadOnly), rwText(me.readWrite)), f.statusNext)
	}
	if f.o.UsageErr == nil && use == nil {
		f.problems.Problem("Talos' MountStatus says "+me.target+" is mounted, but the Mounts API does not list it", f.t.talosctl("mounts")+"; "+f.t.talosctl("dmesg"))
	}
}

// capacity compares the Mounts API's size of the target with minSize.
func (f *mountFacts) capacity(use *Usage) {
	me := f.me
	if use != nil {
		f.evidence = append(f.evidence, fmt.Sprintf("Mounts: %s on %s, %s, %s free", use.Source, use.Target, size(use.Size), size(use.Available)))
		if me.minSize > 0 && use.Size < me.minSize {
			f.problems.Problem(fmt.Sprintf("%s has %s, below minSize %s", me.target, size(use.Size), size(me.minSize)), f.t.talosctl("mounts")+"; "+f.t.talosctl("get disks"))
		}
	} else if me.minSize > 0 && f.o.UsageErr != nil {
		f.unknown = append(f.unknown, fmt.Errorf("capacity of %s not known", me.target))
	}
}

// kubeletMount checks that the kubelet sees the mount as the expectation says.
func (f *mountFacts) kubeletMount() {
	switch {
	case f.o.KubeletErr != nil:
		f.unknown = append(f.unknown, f.o.KubeletErr)
	case !f.o.KubeletFound:
		f.problems.Problem("no KubeletSpec: the kubelet is not configured", f.t.talosctl("service kubelet"))
		f.actual = append(f.actual, "no KubeletSpec")
	default:
		f.kubeletExtraMount()
	}
}

// kubeletExtraMount compares the KubeletSpec's extraMount of the target with
// the options the expectation needs.
func (f *mountFacts) kubeletExtraMount() {
	me := f.me
	kubeletNext := f.t.talosctl("get kubeletspec -o yaml") + "; " + "devata apply --machines " + f.t.Machine.Name + " (the kubelet restarts with its extraMounts)"
	i := slices.IndexFunc(f.o.KubeletMounts, func(k KubeletMount) bool { return k.Destination == me.target })
	if i < 0 && me.roViaTalos() {
		// system/services/kubelet.go mounts /var/mnt rbind,rshared,ro into every kubelet; KubeletSpec never shows it
		f.evidence = append(f.evidence, "no kubelet extraMount for "+me.target+": Talos bind-mounts "+userVolumesRoot+" into the kubelet (rbind,rshared,ro), so it sees the volume read-only")
		f.actual = append(f.actual, "kubelet "+userVolumesRoot+" rbind,rshared,ro")
		return
	}
	if i < 0 {
		f.problems.Problem("the kubelet has no extraMount for "+me.target+": pods would not see the volume", kubeletNext)
		f.actual = append(f.actual, "kubelet: no extraMount")
		return
	}
	km := f.o.KubeletMounts[i]
	f.evidence = append(f.evidence, fmt.Sprintf("KubeletSpec extraMount %s → %s (%s)", km.Source, km.Destination, strings.Join(km.Options, ",")))
	f.actual = append(f.actual, "kubelet "+strings.Join(km.Options, ","))
	if missing := missingOptions(km.Options, me.kubelet); len(missing) > 0 {
		p := "the kubelet's extraMount " + me.target + " lacks " + strings.Join(missing, ", ")
		if slices.Contains(missing, "rshared") {
			p += " (mounts made inside pods, e.g. Longhorn's, do not propagate)"
		}
		f.problems.Problem(p, kubeletNext)
	}
}

// result folds the facts into the mount's result: Drifted on any problem
// (naming what was not read in its evidence), else Unknown on anything not
// read, else InSync.
func (f *mountFacts) result() drift.Result {
	switch {
	case f.problems.HasProblems():
		r := drift.Drifted(f.me.what+": "+f.problems.Problems(), f.me.want(), strings.Join(f.actual, ", ")).
			WithEvidence(f.evidence...).WithNext(f.problems.FirstNext())
		for _, err := range f.unknown {
			r = r.WithEvidence("not read: " + err.Error())
		}
		return r
	case len(f.unknown) > 0:
		n := f.statusNext
		if f.o.UsageErr != nil && client.StatusCode(f.o.UsageErr) == codes.Unknown {
			// machined's Mounts (v1alpha1_server.go) answers nothing, code Unknown, when statfs fails on one mount point
			n = f.t.talosctl("mounts") + " fails as a whole when statfs fails on any one mount point (a dead disk, FUSE or NFS mount): " + f.t.talosctl("dmesg") + "; meanwhile " + f.statusNext
		}
		return unknownRead(fmt.Errorf("%s: %w", f.me.what, errors.Join(f.unknown...)), n).WithEvidence(f.evidence...)
	}
	return drift.InSync(f.evidence...)
}

func rwText(rw bool) string {
	if rw {
		return "rw"
	}
	return "ro"
}
