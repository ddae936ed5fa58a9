package bootstrap

import (
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
)

// contractOf decides the contract (plan.Contract) from what the machines reported.
func contractOf(inv *inventory.Inventory, st *fleetState) plan.Contract {
	target := inv.Cluster.TalosVersion
	tm, ok := talos.Minor(target)
	c := plan.Contract{Target: target, Talos: strings.TrimPrefix(target, "v")}
	if ok {
		c.Talos = fmt.Sprintf("1.%d", tm)
	}
	answered := 0
	for i := range inv.Machines {
		m := &inv.Machines[i]
		o := st.obs[m.Name]
		if o == nil || (o.Err != nil && !o.Maintenance) || o.Version == "" {
			continue
		}
		answered++
		rm, rok := talos.Minor(o.Version)
		if !ok || !rok || rm >= tm || rm < talos.OldestMinor {
			continue
		}
		c.Older = append(c.Older, plan.ContractMachine{Machine: m.Name, Runs: o.Version, Talos: fmt.Sprintf("1.%d", rm), Maintenance: o.Maintenance})
	}
	switch {
	case len(c.Older) > 0:
		oldest := slices.MinFunc(c.Older, func(a, b plan.ContractMachine) int {
			am, _ := talos.Minor(a.Runs)
			bm, _ := talos.Minor(b.Runs)
			return am - bm
		})
		c.Talos = oldest.Talos
		var runs []string
		for _, o := range c.Older {
			if o.Maintenance {
				runs = append(runs, o.Machine+" runs "+o.Runs+" in maintenance mode")
				continue
			}
			runs = append(runs, o.Machine+" runs "+o.Runs)
		}
		c.Reason = fmt.Sprintf("the oldest release a machine runs (%s; cluster.talosVersion is %s): each machine older than %s gets a config its own release accepts until it is upgraded, the others %s's",
			strings.Join(runs, ", "), target, target, target)
	case answered == 0:
		c.Reason = fmt.Sprintf("cluster.talosVersion %s, since no machine answered with its Talos version (maintenance mode or unreachable)", target)
	default:
		c.Reason = fmt.Sprintf("cluster.talosVersion %s, since no machine runs an older release (%d of %d answered with their version)", target, answered, len(inv.Machines))
	}
	return c
}

// bootRelease is the Talos version a machine in maintenance mode is
// configured for, and why: the release it booted, as it reported it; when
// that could not be read, the oldest release another machine of the
// inventory reported, else the Talos version the --recover-from snapshot's
// sidecar recorded, else cluster.talosVersion.
func (s *Sequence) bootRelease(m *inventory.Machine) (version, why string) {
	o := s.st.obs[m.Name]
	if o != nil && o.Version != "" {
		return o.Version, "it boots " + o.Version
	}
	unread := "its Talos version could not be read"
	if o != nil && o.VersionErr != nil {
		unread += " (" + o.VersionErr.Error() + ")"
	}
	oldest, by := "", ""
	for i := range s.inv.Machines {
		other := s.inv.Machines[i].Name
		ob := s.st.obs[other]
		if other == m.Name || ob == nil || ob.Version == "" || (ob.Err != nil && !ob.Maintenance) {
			continue
		}
		vm, ok := talos.Minor(ob.Version)
		if !ok {
			continue
		}
		if om, _ := talos.Minor(oldest); oldest == "" || vm < om {
			oldest, by = ob.Version, other
		}
	}
	switch {
	case oldest != "":
		return oldest, fmt.Sprintf("%s; the oldest release another machine runs: %s runs %s", unread, by, oldest)
	case s.opts.RecoverTalos != "":
		return s.opts.RecoverTalos, fmt.Sprintf("%s; the Talos version the snapshot's sidecar recorded: %s", unread, s.opts.RecoverTalos)
	}
	target := s.inv.Cluster.TalosVersion
	return target, fmt.Sprintf("%s and no other machine said its own; cluster.talosVersion %s", unread, target)
}

// contractName is the config contract a config for a machine running
// version follows: the release's minor ("1.13"), the inventory's when
// version is newer.
func (s *Sequence) contractName(version string) string {
	target := s.inv.Cluster.TalosVersion
	vm, ok := talos.Minor(version)
	tm, tok := talos.Minor(target)
	switch {
	case ok && tok && vm < tm && vm >= talos.OldestMinor:
		return fmt.Sprintf("1.%d", vm)
	case tok:
		return fmt.Sprintf("1.%d", tm)
	}
	return strings.TrimPrefix(target, "v")
}

// runs is the Talos version m reported in the last observation, "" when
// not known.
func (s *Sequence) runs(m *inventory.Machine) string {
	if s.st == nil {
		return ""
	}
	if o := s.st.obs[m.Name]; o != nil {
		return o.Version
	}
	return ""
}
