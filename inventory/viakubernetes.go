package inventory

import (
	"fmt"
	"maps"
	"slices"
)

// validateViaKubernetes refuses a label or taint key a machine gets both
// in labels (or taints), which Talos writes, and in viaKubernetes, which
// devata writes through the Kubernetes API: two writers of one key would
// undo each other on every pass.
func (v *validator) validateViaKubernetes() {
	for i := range v.inv.Machines {
		m := &v.inv.Machines[i]
		for _, kind := range []struct {
			what       string
			talos, api map[string]string
		}{{"label", m.NodeLabels(), m.ViaKubernetesLabels()}, {"taint", m.NodeTaints(), m.ViaKubernetesTaints()}} {
			for _, k := range slices.Sorted(maps.Keys(kind.api)) {
				if _, both := kind.talos[k]; !both {
					continue
				}
				v.errorf(v.viaKubernetesSource(i, m, kind.what, k), "%s %s on machine %s is both in %ss (%s, which Talos sets) and in viaKubernetes.%ss (which devata sets through the Kubernetes API): keep it in one of them",
					kind.what, k, m.Name, kind.what, v.keySource(i, m, kind.what, k), kind.what)
			}
		}
	}
}

// keySource is the field that gives machine i the label or taint k (what
// names which): its own, or the first group's.
func (v *validator) keySource(i int, m *Machine, what, k string) string {
	if what == "taint" {
		return v.taintSource(i, m, k)
	}
	return v.labelSource(i, m, k)
}

// viaKubernetesSource is the field that gives machine i the viaKubernetes
// label or taint k: its own, or the first group's.
func (v *validator) viaKubernetesSource(i int, m *Machine, what, k string) string {
	keys := func(vk ViaKubernetes) map[string]string {
		if what == "taint" {
			return vk.Taints
		}
		return vk.Labels
	}
	if _, own := keys(m.ViaKubernetes)[k]; own {
		return fmt.Sprintf("machines[%d].viaKubernetes.%ss[%q]", i, what, k)
	}
	for gi := range v.inv.Groups {
		if g := &v.inv.Groups[gi]; slices.Contains(m.Groups, g.Name) {
			if _, ok := keys(g.ViaKubernetes)[k]; ok {
				return fmt.Sprintf("groups[%d].viaKubernetes.%ss[%q]", gi, what, k)
			}
		}
	}
	return fmt.Sprintf("machines[%d]", i)
}
