package storagecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/cel/celenv"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
)

// Check names, as `devata drift --checks` takes them.
const (
	CheckDeclaration = "storage-declaration"
	CheckVolumes     = "storage-volumes"
	CheckMounts      = "storage-mounts"
	CheckRawDisks    = "storage-raw-disks"
)

// noneExpected is the evidence of every storage check on a machine that
// expects no storage at all.
const noneExpected = "no volumes expected"

// Target is everything the storage checks need about one machine.
type Target struct {
	Machine *inventory.Machine
	// Desired is the machine's rendered config; its UserVolumeConfig documents
	// and machine.disks partitions are expected on the node. Nil means only
	// the inventory's volumes are expected.
	Desired []byte
	// Active is the node's active MachineConfig (v1alpha1) as Talos stores it
	// (machines.Observation.Active); ActiveErr says why it could not be read.
	// Only storage-declaration needs it.
	Active    []byte
	ActiveErr error
	// Obs is what Observe read; nil means storage was not observed.
	Obs *Observation

	exp *expectations // set by NewTarget; else derived per check
}

// NewTarget builds a Target and derives its expectations once (a literal
// Target works too, deriving them in every check).
func NewTarget(m *inventory.Machine, desired, active []byte, activeErr error, obs *Observation) *Target {
	return &Target{Machine: m, Desired: desired, Active: active, ActiveErr: activeErr, Obs: obs, exp: expect(m, desired)}
}

func (t *Target) addr() string { return t.Machine.Address }

func (t *Target) talosctl(args string) string { return "talosctl -n " + t.addr() + " " + args }

func (t *Target) expectations() *expectations {
	if t.exp != nil {
		return t.exp
	}
	return expect(t.Machine, t.Desired)
}

// Checks returns the storage checks in ladder order. Every one fails open: an
// Unknown storage result is reported but does not block a rollout, since a
// rollout is what brings missing volumes in; the config check guards the
// rollout itself.
func Checks() []drift.Check[*Target] {
	return []drift.Check[*Target]{
		{Name: CheckDeclaration, Rung: drift.RungDeclaration, Run: checkDeclaration},
		{Name: CheckVolumes, Rung: drift.RungReconciliation, Run: checkVolumes},
		{Name: CheckMounts, Rung: drift.RungInfrastructure, Run: checkMounts},
		{Name: CheckRawDisks, Rung: drift.RungInfrastructure, Run: checkRawDisks},
	}
}

// notObserved is the Unknown of a check whose machine was not observed.
func notObserved(t *Target) (drift.Result, bool) {
	switch {
	case t.Obs == nil:
		return drift.Unknown(errors.New("storage was not observed"), t.talosctl("get volumestatus")), true
	case t.Obs.Err != nil:
		return drift.Unknown(t.Obs.Err, "check that "+t.Machine.Name+" is up and its Talos API reachable: "+t.talosctl("version")), true
	}
	return drift.Result{}, false
}

func unknownRead(t *Target, err error, next string) drift.Result {
	if client.StatusCode(err) == codes.PermissionDenied {
		next = "the talosconfig's certificate lacks the role this read needs (storage resources need os:reader, the active MachineConfig os:admin): use a talosconfig with that role"
	}
	return drift.Unknown(err, next)
}

// checkDeclaration compares the storage documents of the active config with
// the rendered one: every UserVolumeConfig, machine.disks partition and
// kubelet extraMount of a volume.
//
//nolint:gocognit,gocyclo,cyclop // one comparison per kind of document, top to bottom
func checkDeclaration(_ context.Context, t *Target) []drift.Result {
	name := t.Machine.Name
	e := t.expectations()
	if e.desiredErr != nil {
		return []drift.Result{drift.Unknown(fmt.Errorf("rendered config does not load: %w", e.desiredErr), "devata validate")}
	}
	if len(t.Active) == 0 && e.empty() {
		// nothing to declare; a stray document in the active config is the config check's to find
		return []drift.Result{drift.InSync(noneExpected)}
	}
	if t.Obs != nil && t.Obs.Err != nil {
		r, _ := notObserved(t)
		return []drift.Result{r}
	}
	if len(t.Active) == 0 {
		err := t.ActiveErr
		if err == nil {
			err = errors.New("the active config was not read")
		}
		return []drift.Result{unknownRead(t, err, t.talosctl("get machineconfig v1alpha1 -o yaml (needs os:admin)"))}
	}
	active, err := configloader.NewFromBytes(t.Active)
	if err != nil {
		return []drift.Result{drift.Unknown(fmt.Errorf("active config does not load: %w", err), t.talosctl("get machineconfig v1alpha1 -o yaml"))}
	}

	var problems, evidence, desiredNames, activeNames []string
	next := ""
	addProblem := func(p, n string) {
		problems = append(problems, p)
		if next == "" {
			next = n
		}
	}
	apply := "devata apply --machines " + name

	activeUV := map[string]string{}
	for _, uv := range active.UserVolumeConfigs() {
		activeUV[uv.Name()] = describeUserVolume(uv)
		activeNames = append(activeNames, uv.Name())
	}
	desiredUV := map[string]string{}
	if e.desired != nil {
		for _, uv := range e.desired.UserVolumeConfigs() {
			desiredUV[uv.Name()] = describeUserVolume(uv)
		}
	}
	for _, v := range e.volumes {
		if v.legacy {
			continue
		}
		desiredNames = append(desiredNames, v.name)
		got, ok := activeUV[v.name]
		switch {
		case !ok:
			addProblem("active config has no UserVolumeConfig "+v.name, apply+" (then: "+t.talosctl("get volumeconfig "+v.id+" -o yaml")+")")
		case desiredUV[v.name] != "" && got != desiredUV[v.name]:
			addProblem(fmt.Sprintf("UserVolumeConfig %s differs: active %s; desired %s", v.name, got, desiredUV[v.name]), apply)
		case desiredUV[v.name] == "" && !strings.Contains(got, fmt.Sprintf("diskSelector %q", v.selector)):
			addProblem(fmt.Sprintf("UserVolumeConfig %s differs from the inventory: active %s; inventory diskSelector %q", v.name, got, v.selector), apply)
		}
	}
	for n := range activeUV {
		if !slices.ContainsFunc(e.volumes, func(v *expectedVolume) bool { return !v.legacy && v.name == n }) {
			addProblem("active config has UserVolumeConfig "+n+", which is not desired", apply+" (removing a UserVolumeConfig does not wipe its partition)")
		}
	}
	slices.Sort(activeNames)
	evidence = append(evidence, "active UserVolumeConfig ["+strings.Join(activeNames, " ")+"]")

	// legacy machine.disks partitions
	type part struct {
		device, mountpoint string
		size               uint64
	}
	var activeParts []part
	if mc := active.Machine(); mc != nil {
		for _, d := range mc.Disks() {
			for _, p := range d.Partitions() {
				activeParts = append(activeParts, part{d.Device(), p.MountPoint(), p.Size()})
			}
		}
	}
	for _, p := range activeParts {
		if !slices.ContainsFunc(e.volumes, func(v *expectedVolume) bool { return v.legacy && v.device == p.device && v.target == p.mountpoint }) {
			addProblem(fmt.Sprintf("active config has machine.disks partition %s on %s, which is not desired", p.mountpoint, p.device), apply)
		}
	}
	hasLegacy := false
	for _, v := range e.volumes {
		if !v.legacy {
			continue
		}
		hasLegacy = true
		i := slices.IndexFunc(activeParts, func(p part) bool { return p.device == v.device && p.mountpoint == v.target })
		switch {
		case i < 0:
			addProblem(fmt.Sprintf("active config lacks machine.disks partition %s on %s", v.target, v.device), apply)
		case activeParts[i].size != v.minSize:
			addProblem(fmt.Sprintf("machine.disks partition %s on %s is %s in the active config, desired %s", v.target, v.device, sizeOrFill(activeParts[i].size), sizeOrFill(v.minSize)), apply)
		}
	}
	if hasLegacy || len(activeParts) > 0 {
		var ps []string
		for _, p := range activeParts {
			ps = append(ps, p.device+":"+p.mountpoint)
		}
		evidence = append(evidence, "active machine.disks partitions ["+strings.Join(ps, " ")+"]")
	}

	// kubelet extraMounts of volumes
	var activeMounts []string
	if mc := active.Machine(); mc != nil && mc.Kubelet() != nil {
		for _, em := range mc.Kubelet().ExtraMounts() {
			if !slices.ContainsFunc(e.volumes, func(v *expectedVolume) bool { return v.kubeletMount != "" && v.target == em.Destination }) {
				continue
			}
			activeMounts = append(activeMounts, em.Destination+"("+strings.Join(em.Options, ",")+")")
			for _, v := range e.volumes {
				if v.kubeletMount == "" || v.target != em.Destination {
					continue
				}
				if missing := missingOptions(em.Options, v.kubeletMount); len(missing) > 0 {
					addProblem(fmt.Sprintf("active kubelet extraMount %s lacks %s", v.target, strings.Join(missing, ", ")), apply)
				}
			}
		}
	}
	for _, v := range e.volumes {
		if !e.needsKubeletExtraMount(v) {
			continue
		}
		if !slices.ContainsFunc(activeMounts, func(s string) bool { return strings.HasPrefix(s, v.target+"(") }) {
			addProblem("active config has no kubelet extraMount for "+v.target, apply)
		}
	}
	if len(activeMounts) > 0 {
		evidence = append(evidence, "active kubelet extraMounts ["+strings.Join(activeMounts, " ")+"]")
	}

	if len(problems) > 0 {
		return []drift.Result{drift.Drifted(strings.Join(problems, "; "), declared(desiredNames, e), declared(activeNames, nil)).WithEvidence(evidence...).WithNext(next)}
	}
	if e.empty() {
		return []drift.Result{drift.InSync(append([]string{noneExpected}, evidence...)...)}
	}
	return []drift.Result{drift.InSync(evidence...)}
}

func declared(names []string, e *expectations) string {
	s := "UserVolumeConfig [" + strings.Join(names, " ") + "]"
	if e != nil {
		n := 0
		for _, v := range e.volumes {
			if v.legacy {
				n++
			}
		}
		if n > 0 {
			s += fmt.Sprintf(", %d machine.disks partitions", n)
		}
	}
	return s
}

func sizeOrFill(n uint64) string {
	if n == 0 {
		return "the rest of the disk"
	}
	return size(n)
}

// missingOptions are the options a kubelet mount of a volume needs (bind,
// rshared, and rw or ro) that opts lacks.
func missingOptions(opts []string, mode string) []string {
	var missing []string
	for _, want := range []string{"rshared", mode} {
		if !slices.Contains(opts, want) {
			missing = append(missing, want)
		}
	}
	return missing
}

// checkVolumes reports each expected volume's VolumeStatus: phase ready, the
// expected filesystem, at least minSize.
func checkVolumes(_ context.Context, t *Target) []drift.Result {
	e := t.expectations()
	if len(e.volumes) == 0 {
		ev := "no volumes expected"
		if !e.empty() {
			ev = "no volumes expected (mounts or raw disks only)"
		}
		return []drift.Result{drift.InSync(ev)}
	}
	if r, ok := notObserved(t); ok {
		return []drift.Result{r}
	}
	o := t.Obs
	var out []drift.Result
	for _, v := range e.volumes {
		next := t.talosctl("get volumestatus " + v.id + " -o yaml")
		if o.VolumesErr != nil {
			out = append(out, unknownRead(t, o.VolumesErr, next))
			continue
		}
		st, ok := o.Volumes[v.id]
		want := "ready, " + v.filesystem
		if v.minSize > 0 {
			want += ", ≥ " + size(v.minSize)
		}
		if !ok {
			reason := "Talos has no VolumeStatus " + v.id + " for " + v.label()
			out = append(out, drift.Drifted(reason, want, "no VolumeStatus").
				WithEvidence("VolumeStatus IDs ["+strings.Join(sortedKeys(o.Volumes), " ")+"]").
				WithNext(t.talosctl("get volumeconfig "+v.id+" -o yaml")+" (is it declared? see "+CheckDeclaration+")"))
			continue
		}
		evidence := describeVolume(st)
		switch {
		case st.Phase == "waiting" || st.Phase == "failed":
			out = append(out, t.volumeNotReady(v, st, o.Volumes).WithEvidence(evidence))
		case st.Phase != "ready":
			out = append(out, drift.Drifted(v.id+" is "+st.Phase+", not ready", "ready", st.Phase).
				WithEvidence(evidence).WithNext(next))
		default:
			var problems []string
			if st.Filesystem != v.filesystem {
				problems = append(problems, fmt.Sprintf("%s has filesystem %s, want %s", v.id, orNone(st.Filesystem), v.filesystem))
			}
			if v.minSize > 0 && st.Size < v.minSize {
				problems = append(problems, fmt.Sprintf("%s is %s, below minSize %s", v.id, size(st.Size), size(v.minSize)))
			}
			if len(problems) == 0 {
				out = append(out, drift.InSync(evidence))
				continue
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
			out = append(out, drift.Drifted(strings.Join(problems, "; "), want, fmt.Sprintf("ready, %s, %s", orNone(st.Filesystem), size(st.Size))).WithEvidence(evidence).WithNext(n))
		}
	}
	return out
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
// stopped, and what to look at.
//
//nolint:gocognit,gocyclo,cyclop // one case per way Talos stops
func (t *Target) volumeNotReady(v *expectedVolume, st Volume, all map[string]Volume) drift.Result {
	name, msg := t.Machine.Name, st.ErrorMessage
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
	case waiting:
		reason := v.id + " is waiting for a disk"
		if msg != "" {
			reason += ": " + msg
		}
		reason += selector
		var matched, space, format, other int
		if _, err := fmt.Sscanf(msg, talosNoDiskFits, &matched, &space, &format, &other); err == nil {
			var hints, nexts []string
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
			if len(nexts) > 0 {
				reason += ": " + strings.Join(hints, "; ")
				fix = strings.Join(nexts, "; ")
			}
		} else if strings.HasPrefix(msg, talosNoSpace) {
			reason += ": the disk Talos picked had too little room left once partitioned"
		}
		return drift.Drifted(reason, "ready", "waiting").WithNext(fix + "; then " + status)
	case strings.HasPrefix(msg, talosFSMismatch):
		// format.go: a partition with another filesystem is never reformatted
		found, wanted, _ := strings.Cut(strings.TrimPrefix(msg, talosFSMismatch), " != ")
		dev := devName(st.Location)
		reason := fmt.Sprintf("%s failed: its partition %s already carries %s, the volume wants %s, and Talos does not reformat it (%q)", v.id, orNone(st.Location), found, wanted, msg)
		next := t.talosctl("get discoveredvolumes "+dev+" -o yaml") + " shows what is on it; "
		if !v.legacy && (found == "xfs" || found == "ext4") {
			next += "to keep its data, set the volume's filesystem to " + found + " and run devata apply --machines " + name + "; "
		}
		next += "only if its data is disposable: " + t.talosctl("wipe disk "+dev+" --skip-volume-check") +
			" (" + v.id + " holds it, so a plain wipe is refused), then Talos formats it " + wanted
		return drift.Drifted(reason, "ready, "+v.filesystem, fmt.Sprintf("failed: %s on %s", found, orNone(st.Location))).WithNext(next)
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

// signedDisks are the disks whose DiscoveredVolume shows a signature other
// than a GPT ("sdb bluestore"): those Talos will not partition.
func (t *Target) signedDisks() []string {
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

func devName(dev string) string { return strings.TrimPrefix(dev, "/dev/") }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// checkMounts reports, per expected volume and per inventory mount, Talos'
// MountStatus (target, filesystem, read-write), the Mounts API's capacity and,
// where kubeletMount is set, the KubeletSpec's extraMount (rshared, rw|ro).
func checkMounts(_ context.Context, t *Target) []drift.Result {
	e := t.expectations()
	if len(e.volumes) == 0 && len(e.mounts) == 0 {
		ev := noneExpected
		if !e.empty() {
			ev = "no mounts expected (raw disks only)"
		}
		return []drift.Result{drift.InSync(ev)}
	}
	if r, ok := notObserved(t); ok {
		return []drift.Result{r}
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

//nolint:gocognit,gocyclo,cyclop // one fact after the other
func (t *Target) mountResult(me mountExpectation) drift.Result {
	o, name := t.Obs, t.Machine.Name
	var problems, evidence, actual []string
	var unknown []error
	next := ""
	addProblem := func(p, n string) {
		problems = append(problems, p)
		if next == "" {
			next = n
		}
	}
	want := me.target
	if me.filesystem != "" {
		want += " " + me.filesystem
	}
	want += map[bool]string{true: " rw", false: " ro"}[me.readWrite]
	roViaTalos := me.kubelet == "ro" && underUserVolumes(me.target)
	switch {
	case roViaTalos:
		want += ", kubelet ro (Talos' /var/mnt mount or an extraMount with rshared,ro)"
	case me.kubelet != "":
		want += ", kubelet bind,rshared," + me.kubelet
	}

	var mnt *Mount
	if o.MountsErr != nil {
		unknown = append(unknown, o.MountsErr)
	} else {
		for i := range o.Mounts {
			if o.Mounts[i].Target == me.target {
				mnt = &o.Mounts[i]
				break
			}
		}
	}
	var use *Usage
	if o.UsageErr != nil {
		unknown = append(unknown, o.UsageErr)
	} else {
		for i := range o.Usage {
			if o.Usage[i].Target == me.target {
				use = &o.Usage[i]
			}
		}
	}
	statusNext := t.talosctl("get mountstatus")
	if me.volumeID != "" {
		statusNext = t.talosctl("get volumestatus "+me.volumeID+" -o yaml") + "; " + statusNext
	}

	switch {
	case mnt != nil:
		evidence = append(evidence, fmt.Sprintf("MountStatus %s: %s on %s %s %s", mnt.ID, mnt.Source, mnt.Target, orNone(mnt.Filesystem), rwText(!mnt.ReadOnly)))
		actual = append(actual, fmt.Sprintf("%s %s %s", mnt.Target, orNone(mnt.Filesystem), rwText(!mnt.ReadOnly)))
		if me.filesystem != "" && mnt.Filesystem != me.filesystem {
			addProblem(fmt.Sprintf("%s is mounted %s, want %s", me.target, orNone(mnt.Filesystem), me.filesystem), statusNext)
		}
		if mnt.ReadOnly == me.readWrite {
			addProblem(fmt.Sprintf("%s is mounted %s, want %s", me.target, rwText(!mnt.ReadOnly), rwText(me.readWrite)), statusNext)
		}
		if o.UsageErr == nil && use == nil {
			addProblem("Talos' MountStatus says "+me.target+" is mounted, but the Mounts API does not list it", t.talosctl("mounts")+"; "+t.talosctl("dmesg"))
		}
	case o.MountsErr != nil:
	case me.inventory && use != nil:
		// not a Talos volume (or not one Talos tracks): the kernel's table is all there is
		evidence = append(evidence, "no MountStatus targets "+me.target+": filesystem and read-write are not verified")
		actual = append(actual, me.target+" mounted")
		if me.filesystem != "" {
			unknown = append(unknown, fmt.Errorf("%s is mounted but Talos has no MountStatus for it: its filesystem cannot be verified", me.target))
		}
	default:
		reason := "nothing is mounted at " + me.target
		if st, ok := o.Volumes[me.volumeID]; ok && me.volumeID != "" && st.Phase != "ready" {
			reason += " (VolumeStatus " + me.volumeID + " is " + st.Phase + ": see " + CheckVolumes + ")"
		}
		actual = append(actual, "not mounted")
		addProblem(reason, statusNext)
	}
	if use != nil {
		evidence = append(evidence, fmt.Sprintf("Mounts: %s on %s, %s, %s free", use.Source, use.Target, size(use.Size), size(use.Available)))
		if me.minSize > 0 && use.Size < me.minSize {
			addProblem(fmt.Sprintf("%s has %s, below minSize %s", me.target, size(use.Size), size(me.minSize)), t.talosctl("mounts")+"; "+t.talosctl("get disks"))
		}
	} else if me.minSize > 0 && o.UsageErr != nil {
		unknown = append(unknown, fmt.Errorf("capacity of %s not known", me.target))
	}

	if me.kubelet != "" {
		kubeletNext := t.talosctl("get kubeletspec -o yaml") + "; " + "devata apply --machines " + name + " (the kubelet restarts with its extraMounts)"
		switch {
		case o.KubeletErr != nil:
			unknown = append(unknown, o.KubeletErr)
		case !o.KubeletFound:
			addProblem("no KubeletSpec: the kubelet is not configured", t.talosctl("service kubelet"))
			actual = append(actual, "no KubeletSpec")
		default:
			i := slices.IndexFunc(o.KubeletMounts, func(k KubeletMount) bool { return k.Destination == me.target })
			if i < 0 && roViaTalos {
				// system/services/kubelet.go mounts /var/mnt rbind,rshared,ro into every kubelet; KubeletSpec never shows it
				evidence = append(evidence, "no kubelet extraMount for "+me.target+": Talos bind-mounts "+userVolumesRoot+" into the kubelet (rbind,rshared,ro), so it sees the volume read-only")
				actual = append(actual, "kubelet "+userVolumesRoot+" rbind,rshared,ro")
				break
			}
			if i < 0 {
				addProblem("the kubelet has no extraMount for "+me.target+": pods would not see the volume", kubeletNext)
				actual = append(actual, "kubelet: no extraMount")
				break
			}
			km := o.KubeletMounts[i]
			evidence = append(evidence, fmt.Sprintf("KubeletSpec extraMount %s → %s (%s)", km.Source, km.Destination, strings.Join(km.Options, ",")))
			actual = append(actual, "kubelet "+strings.Join(km.Options, ","))
			if missing := missingOptions(km.Options, me.kubelet); len(missing) > 0 {
				p := "the kubelet's extraMount " + me.target + " lacks " + strings.Join(missing, ", ")
				if slices.Contains(missing, "rshared") {
					p += " (mounts made inside pods, e.g. Longhorn's, do not propagate)"
				}
				addProblem(p, kubeletNext)
			}
		}
	}

	switch {
	case len(problems) > 0:
		r := drift.Drifted(me.what+": "+strings.Join(problems, "; "), want, strings.Join(actual, ", ")).
			WithEvidence(evidence...).WithNext(next)
		for _, err := range unknown {
			r = r.WithEvidence("not read: " + err.Error())
		}
		return r
	case len(unknown) > 0:
		n := statusNext
		if o.UsageErr != nil && client.StatusCode(o.UsageErr) == codes.Unknown {
			// machined's Mounts (v1alpha1_server.go) answers nothing, code Unknown, when statfs fails on one mount point
			n = t.talosctl("mounts") + " fails as a whole when statfs fails on any one mount point (a dead disk, FUSE or NFS mount): " + t.talosctl("dmesg") + "; meanwhile " + statusNext
		}
		return unknownRead(t, fmt.Errorf("%s: %w", me.what, errors.Join(unknown...)), n).WithEvidence(evidence...)
	}
	return drift.InSync(evidence...)
}

func rwText(rw bool) string {
	if rw {
		return "rw"
	}
	return "ro"
}

// checkRawDisks reports, per rawDisks entry, that its selector matches enough
// disks and that none of them carries a partition or a signature other than
// those allowed.
//
//nolint:gocognit,gocyclo,cyclop // one fact after the other
func checkRawDisks(_ context.Context, t *Target) []drift.Result {
	e := t.expectations()
	if len(e.rawDisks) == 0 {
		ev := noneExpected
		if !e.empty() {
			ev = "no raw disks expected"
		}
		return []drift.Result{drift.InSync(ev)}
	}
	if r, ok := notObserved(t); ok {
		return []drift.Result{r}
	}
	o := t.Obs
	next := t.talosctl("get disks -o yaml") + "; " + t.talosctl("get discoveredvolumes")
	var out []drift.Result
	for _, rd := range e.rawDisks {
		what := fmt.Sprintf("rawDisks %q", rd.Selector)
		switch {
		case !o.DisksRead:
			out = append(out, drift.Unknown(errors.New(what+": disks were not read"), next))
			continue
		case o.DisksErr != nil:
			out = append(out, unknownRead(t, o.DisksErr, next))
			continue
		case o.DiscoveredErr != nil:
			out = append(out, unknownRead(t, o.DiscoveredErr, next))
			continue
		}
		expr, err := parseSelector(rd.Selector)
		if err != nil {
			out = append(out, drift.Unknown(fmt.Errorf("%s: %w", what, err), "fix the selector in the inventory"))
			continue
		}
		var matched []Disk
		var evalErr error
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
				evalErr = fmt.Errorf("%s on disk %s: %w", what, d.ID, err)
				break
			}
			if ok {
				matched = append(matched, d)
			}
		}
		if evalErr != nil {
			out = append(out, drift.Unknown(evalErr, next))
			continue
		}
		var ids []string
		for _, d := range matched {
			ids = append(ids, d.Spec.GetDevPath())
		}
		evidence := []string{fmt.Sprintf("selector matches %d of %d disks [%s]", len(matched), len(o.Disks), strings.Join(ids, " "))}
		want := fmt.Sprintf("≥ %d blank disks", rd.MinCount)
		var problems []string
		var actualParts []string
		nextFix := next
		if len(matched) < rd.MinCount {
			problems = append(problems, fmt.Sprintf("the selector matches %d disks, want at least %d", len(matched), rd.MinCount))
			actualParts = append(actualParts, fmt.Sprintf("%d disks", len(matched)))
		}
		for _, d := range matched {
			dev := d.Spec.GetDevPath()
			if d.ID == o.SystemDisk {
				problems = append(problems, dev+" is the system disk")
				continue
			}
			var sig string
			var parts []string
			seen := false
			for _, dv := range o.Discovered {
				switch {
				case dv.DevPath == dev && dv.Type == "disk":
					sig, seen = dv.Signature, true
				case dv.ParentDevPath == dev && dv.Type == "partition":
					parts = append(parts, dv.DevPath)
				}
			}
			slices.Sort(parts)
			switch {
			case len(parts) > 0:
				problems = append(problems, fmt.Sprintf("%s has partitions [%s]", dev, strings.Join(parts, " ")))
				actualParts = append(actualParts, dev+" partitioned")
			case !seen:
				problems = append(problems, dev+" has no DiscoveredVolume: Talos has not probed it")
			case sig != "" && !slices.Contains(rd.AllowSignatures, sig):
				problems = append(problems, fmt.Sprintf("%s carries a leftover %s signature", dev, sig))
				actualParts = append(actualParts, dev+" "+sig)
			default:
				state := "blank"
				if sig != "" {
					state = sig + " (allowed)"
				}
				evidence = append(evidence, fmt.Sprintf("DiscoveredVolume %s: %s", devName(dev), state))
				continue
			}
			ev := fmt.Sprintf("DiscoveredVolume %s: %s", devName(dev), orNone(sig))
			if len(parts) > 0 {
				ev += ", partitions [" + strings.Join(parts, " ") + "]"
			}
			evidence = append(evidence, ev)
			if nextFix == next {
				nextFix = t.talosctl("get discoveredvolumes -o yaml") + " shows what is on " + dev + "; only if its data is disposable: " + t.talosctl("wipe disk "+devName(dev))
			}
		}
		if len(problems) == 0 {
			out = append(out, drift.InSync(evidence...))
			continue
		}
		if len(matched) < rd.MinCount {
			nextFix = next + ": which disks does " + fmt.Sprintf("%q", rd.Selector) + " miss?"
		}
		out = append(out, drift.Drifted(what+": "+strings.Join(problems, "; "), want, strings.Join(actualParts, ", ")).
			WithEvidence(evidence...).WithNext(nextFix))
	}
	return out
}
