package inventory

import (
	"fmt"
	"slices"
	"strings"
)

// A group's rollout.order names machines in the order a rollout changes
// them, as a stage barrier: a machine starts only once every machine of
// its group and role named before it is done (converged, failed or held).
// The machines of the group not named share the last stage, after the
// last named one. Stages order machines of one role only: control planes
// still go before every worker, and one at a time. A machine belongs to at
// most one group with an order, so that its place is one number and no two
// orders can wait on each other.

// RolloutStage is m's place in its group's rollout.order: the group's
// name and the stage (the index in the order; the group's machines not
// named share len(order)); ok is false when none of m's groups has an
// order.
func (inv *Inventory) RolloutStage(m *Machine) (group string, stage int, ok bool) {
	for _, name := range m.Groups {
		g := inv.Group(name)
		if g == nil || len(g.Rollout.Order) == 0 {
			continue
		}
		if i := slices.Index(g.Rollout.Order, m.Name); i >= 0 {
			return g.Name, i, true
		}
		return g.Name, len(g.Rollout.Order), true
	}
	return "", 0, false
}

// RolloutAfter reports whether m waits for e in a rollout: both in one
// group with an order, of one role, e at an earlier stage.
func (inv *Inventory) RolloutAfter(m, e *Machine) bool {
	if m.Role != e.Role {
		return false
	}
	gm, sm, ok := inv.RolloutStage(m)
	if !ok {
		return false
	}
	ge, se, ok := inv.RolloutStage(e)
	return ok && ge == gm && se < sm
}

// validateRolloutOrders checks every group's rollout.order once the
// groups are resolved: each name a machine the group selects, named once,
// and no machine in two groups with an order.
func (v *validator) validateRolloutOrders() {
	orderedBy := map[string]int{} // machine → the first group with an order that selects it
	for gi := range v.inv.Groups {
		g := &v.inv.Groups[gi]
		if len(g.Rollout.Order) == 0 {
			continue
		}
		p := fmt.Sprintf("groups[%d].rollout.order", gi)
		for j, name := range g.Rollout.Order {
			jp := fmt.Sprintf("%s[%d]", p, j)
			m := v.inv.Machine(name)
			switch {
			case slices.Index(g.Rollout.Order, name) < j:
				v.errorf(jp, "machine %s is named twice: name each machine once", name)
			case m == nil:
				v.errorf(jp, "no machine is named %s: name machines of group %s, as in machines[].name", name, g.Name)
			case !slices.Contains(m.Groups, g.Name):
				v.errorf(jp, "machine %s is not in group %s (its selector does not pick it): name only the group's machines, or change its labels or the selector", name, g.Name)
			}
		}
		both := map[int][]string{} // an earlier ordered group → the machines it shares with g
		for i := range v.inv.Machines {
			m := &v.inv.Machines[i]
			if !slices.Contains(m.Groups, g.Name) {
				continue
			}
			if first, dup := orderedBy[m.Name]; dup {
				both[first] = append(both[first], m.Name)
				continue
			}
			orderedBy[m.Name] = gi
		}
		for first := range gi {
			if ms := both[first]; len(ms) > 0 {
				v.errorf(p, "groups %s and %s both have a rollout order and both select %s: give the order in one of them (a machine has one place in one order)", v.inv.Groups[first].Name, g.Name, shortNames(ms))
			}
		}
	}
}

// shortNames lists names, the first five and how many more.
func shortNames(names []string) string {
	s := strings.Join(names[:min(len(names), 5)], ", ")
	if len(names) > 5 {
		s += fmt.Sprintf(" and %d more", len(names)-5)
	}
	return s
}
