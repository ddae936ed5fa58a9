package storagecheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"devata.dev/devata/drift"
)

// checkDeclaration compares the storage documents of the active config with
// the rendered one: every UserVolumeConfig, machine.disks partition and
// kubelet extraMount of a volume, one comparison per kind of document, top to
// bottom.
func checkDeclaration(_ context.Context, t *view) []drift.Result {
	e := t.expectations()
	active, r, ok := activeConfig(t, e)
	if !ok {
		return []drift.Result{r}
	}
	d := &declaration{t: t, e: e, apply: "devata apply --machines " + t.Machine.Name}
	d.userVolumes(active)
	d.legacyPartitions(active)
	d.kubeletMounts(active)
	return []drift.Result{d.result()}
}

// activeConfig loads the active config to compare, or says why there is
// nothing to compare: ok is false and r is the check's result.
func activeConfig(t *view, e *expectations) (active config.Provider, r drift.Result, ok bool) {
	if e.desiredErr != nil {
		return nil, drift.Unknown(fmt.Errorf("rendered config does not load: %w", e.desiredErr), "devata validate"), false
	}
	if t.Obs != nil && t.Obs.Err != nil {
		// unreachable: Unknown even when nothing is expected, since
		// nothing was seen (docs/report.md: an Unknown is never InSync)
		r, _ := notObserved(t)
		return nil, r, false
	}
	if len(t.Active) == 0 && e.empty() {
		// nothing to declare; a stray document in the active config is the config check's to find
		return nil, drift.InSync(noneExpected), false
	}
	if len(t.Active) == 0 {
		err := t.ActiveErr
		if err == nil {
			err = errors.New("the active config was not read")
		}
		return nil, unknownRead(err, t.talosctl("get machineconfig v1alpha1 -o yaml (needs os:admin)")), false
	}
	active, err := configloader.NewFromBytes(t.Active)
	if err != nil {
		return nil, drift.Unknown(fmt.Errorf("active config does not load: %w", err), t.talosctl("get machineconfig v1alpha1 -o yaml")), false
	}
	return active, drift.Result{}, true
}

// declaration is what checkDeclaration gathers, document kind by document kind.
type declaration struct {
	t     *view
	e     *expectations
	apply string // the next step of every problem: apply the rendered config

	problems                  drift.Findings
	evidence                  []string
	desiredNames, activeNames []string // UserVolumeConfig names
}

func (d *declaration) result() drift.Result {
	if d.problems.HasProblems() {
		return drift.Drifted(d.problems.Problems(), declared(d.desiredNames, d.e), declared(d.activeNames, nil)).WithEvidence(d.evidence...).WithNext(d.problems.FirstNext())
	}
	if d.e.empty() {
		return drift.InSync(append([]string{noneExpected}, d.evidence...)...)
	}
	return drift.InSync(d.evidence...)
}

// userVolumes compares the active UserVolumeConfigs with the desired ones
// (the rendered config's, or the inventory's where it has none).
func (d *declaration) userVolumes(active config.Provider) {
	activeUV := map[string]string{}
	for _, uv := range active.UserVolumeConfigs() {
		activeUV[uv.Name()] = describeUserVolume(uv)
		d.activeNames = append(d.activeNames, uv.Name())
	}
	desiredUV := map[string]string{}
	if d.e.desired != nil {
		for _, uv := range d.e.desired.UserVolumeConfigs() {
			desiredUV[uv.Name()] = describeUserVolume(uv)
		}
	}
	for _, v := range d.e.volumes {
		if v.legacy {
			continue
		}
		d.desiredNames = append(d.desiredNames, v.name)
		d.userVolume(v, activeUV, desiredUV[v.name])
	}
	// by name, not in map order, so that the reason is the same every time
	for _, n := range sortedKeys(activeUV) {
		if !slices.ContainsFunc(d.e.volumes, func(v *expectedVolume) bool { return !v.legacy && v.name == n }) {
			d.problems.Problem("active config has UserVolumeConfig "+n+", which is not desired", d.apply+" (removing a UserVolumeConfig does not wipe its partition)")
		}
	}
	slices.Sort(d.activeNames)
	d.evidence = append(d.evidence, "active UserVolumeConfig ["+strings.Join(d.activeNames, " ")+"]")
}

// userVolume compares the active UserVolumeConfig of v with desired, its
// description in the rendered config ("" when only the inventory has it).
func (d *declaration) userVolume(v *expectedVolume, activeUV map[string]string, desired string) {
	got, ok := activeUV[v.name]
	switch {
	case !ok:
		d.problems.Problem("active config has no UserVolumeConfig "+v.name, d.apply+" (then: "+d.t.talosctl("get volumeconfig "+v.id+" -o yaml")+")")
	case desired != "" && got != desired:
		d.problems.Problem(fmt.Sprintf("UserVolumeConfig %s differs: active %s; desired %s", v.name, got, desired), d.apply)
	case desired == "" && !strings.Contains(got, fmt.Sprintf("diskSelector %q", v.selector)):
		d.problems.Problem(fmt.Sprintf("UserVolumeConfig %s differs from the inventory: active %s; inventory diskSelector %q", v.name, got, v.selector), d.apply)
	}
}

// partition is a legacy machine.disks partition of the active config.
type partition struct {
	device, mountpoint string
	size               uint64
}

func activePartitions(active config.Provider) []partition {
	var parts []partition
	if mc := active.Machine(); mc != nil {
		for _, d := range mc.Disks() {
			for _, p := range d.Partitions() {
				parts = append(parts, partition{d.Device(), p.MountPoint(), p.Size()})
			}
		}
	}
	return parts
}

// legacyPartitions compares the active machine.disks partitions with the
// desired ones.
func (d *declaration) legacyPartitions(active config.Provider) {
	activeParts := activePartitions(active)
	for _, p := range activeParts {
		if !slices.ContainsFunc(d.e.volumes, func(v *expectedVolume) bool { return v.legacy && v.device == p.device && v.target == p.mountpoint }) {
			d.problems.Problem(fmt.Sprintf("active config has machine.disks partition %s on %s, which is not desired", p.mountpoint, p.device), d.apply)
		}
	}
	hasLegacy := false
	for _, v := range d.e.volumes {
		if !v.legacy {
			continue
		}
		hasLegacy = true
		i := slices.IndexFunc(activeParts, func(p partition) bool { return p.device == v.device && p.mountpoint == v.target })
		switch {
		case i < 0:
			d.problems.Problem(fmt.Sprintf("active config lacks machine.disks partition %s on %s", v.target, v.device), d.apply)
		case activeParts[i].size != v.minSize:
			d.problems.Problem(fmt.Sprintf("machine.disks partition %s on %s is %s in the active config, desired %s", v.target, v.device, sizeOrFill(activeParts[i].size), sizeOrFill(v.minSize)), d.apply)
		}
	}
	if hasLegacy || len(activeParts) > 0 {
		var ps []string
		for _, p := range activeParts {
			ps = append(ps, p.device+":"+p.mountpoint)
		}
		d.evidence = append(d.evidence, "active machine.disks partitions ["+strings.Join(ps, " ")+"]")
	}
}

// kubeletMounts compares the active kubelet extraMounts of volumes with those
// the volumes need.
func (d *declaration) kubeletMounts(active config.Provider) {
	activeMounts := d.activeKubeletMounts(active)
	for _, v := range d.e.volumes {
		if !d.e.needsKubeletExtraMount(v) {
			continue
		}
		if !slices.ContainsFunc(activeMounts, func(s string) bool { return strings.HasPrefix(s, v.target+"(") }) {
			d.problems.Problem("active config has no kubelet extraMount for "+v.target, d.apply)
		}
	}
	if len(activeMounts) > 0 {
		d.evidence = append(d.evidence, "active kubelet extraMounts ["+strings.Join(activeMounts, " ")+"]")
	}
}

// activeKubeletMounts are the active kubelet extraMounts of volumes,
// "destination(options)"; each one that lacks an option its volumes need is
// a problem.
func (d *declaration) activeKubeletMounts(active config.Provider) []string {
	var activeMounts []string
	k := active.K8sKubeletConfig()
	if k == nil {
		return nil
	}
	for _, em := range k.ExtraMounts() {
		if !slices.ContainsFunc(d.e.volumes, func(v *expectedVolume) bool { return v.kubeletMount != "" && v.target == em.Destination }) {
			continue
		}
		activeMounts = append(activeMounts, em.Destination+"("+strings.Join(em.Options, ",")+")")
		for _, v := range d.e.volumes {
			if v.kubeletMount == "" || v.target != em.Destination {
				continue
			}
			if missing := missingOptions(em.Options, v.kubeletMount); len(missing) > 0 {
				d.problems.Problem(fmt.Sprintf("active kubelet extraMount %s lacks %s", v.target, strings.Join(missing, ", ")), d.apply)
			}
		}
	}
	return activeMounts
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
