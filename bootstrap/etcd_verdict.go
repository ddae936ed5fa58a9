package bootstrap

import (
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/inventory"
)

// verdict is the sequence's reading of etcd across the control planes.
type verdict int

const (
	etcdNone    verdict = iota // no control plane has etcd data: bootstrap one
	etcdOurs                   // a cluster of exactly our control planes exists (maybe still forming)
	etcdForeign                // refuse: data that is not a cluster of our control planes
	etcdUnclear                // cannot decide: some control plane did not answer clearly
	etcdBroken                 // refuse: a control plane's etcd failed on data it cannot start from
)

// foreignVerdict says why the etcd data of withData was not made by this
// sequence from this inventory (want are its control planes, listed those
// whose member list answered, inMaintenance those still unconfigured), or
// "" when nothing says so.
func foreignVerdict(inv *inventory.Inventory, st *fleetState, want, withData, listed, inMaintenance []string) string {
	var first etcdFact
	if len(listed) > 0 {
		first = st.etcd[listed[0]]
	}
	for _, name := range withData {
		f := st.etcd[name]
		if len(inMaintenance) > 0 {
			return fmt.Sprintf("%s already has etcd data (%s) while %s %s still in maintenance mode. "+
				"devata bootstrap configures every machine before it bootstraps etcd, so it did not make this data from this inventory; nothing was applied or bootstrapped. "+
				"If %s belongs to another cluster, wipe it (talosctl -n %s reset --graceful=false --reboot --system-labels-to-wipe EPHEMERAL) and run bootstrap again; "+
				"if it is this cluster's and %s %s reinstalled, that is a control-plane replacement, not a bootstrap (talosctl etcd remove-member, then talosctl apply-config --insecure)",
				name, f.Seen, strings.Join(inMaintenance, ", "), isAre(len(inMaintenance)), name, inv.Machine(name).Address, strings.Join(inMaintenance, ", "), wasWere(len(inMaintenance)))
		}
		if f.NoLeader || f.Starting {
			continue
		}
		for _, member := range f.Members {
			if !slices.Contains(want, member) {
				return fmt.Sprintf("%s already has etcd data (%s): member %q is not a control plane of this inventory; refusing to bootstrap", name, f.Seen, member)
			}
		}
		// two views of one cluster taken a moment apart may differ while a
		// member is added or removed (a wiped control plane rejoining
		// removes its old member first); one cluster's views share member
		// IDs, two clusters' never do (each member ID is random, and a
		// bootstrap or a restore makes new ones)
		if !slices.Equal(f.Members, first.Members) && !shareMember(f, first) {
			return fmt.Sprintf("%s and %s report different etcd clusters (%s; %s): refusing to bootstrap", listed[0], name, first.Seen, f.Seen)
		}
	}
	return ""
}

// etcdVerdict decides from every control plane's answer. It is "ours" only
// when every node with data reports members that are all configured control
// planes, all of them agree, and no control plane is still in maintenance
// mode: devata bootstraps only after every machine left maintenance mode, so
// etcd data next to an unconfigured control plane was not made by this
// sequence from this inventory.
func etcdVerdict(inv *inventory.Inventory, st *fleetState) (verdict, string) {
	cps := inv.ControlPlanes()
	var want []string
	for _, m := range cps {
		want = append(want, m.Name)
	}
	var withData, inMaintenance []string
	var unclear []string
	for _, m := range cps {
		f := st.etcd[m.Name]
		switch {
		case f.HasData:
			withData = append(withData, m.Name)
		case st.maintenance(m.Name):
			inMaintenance = append(inMaintenance, m.Name)
		case f.Err != nil:
			unclear = append(unclear, m.Name+": "+f.Seen)
		}
	}
	slices.Sort(withData)
	if why := brokenVerdict(inv, st); why != "" {
		return etcdBroken, why
	}
	if len(withData) == 0 {
		if len(unclear) > 0 {
			return etcdUnclear, "cannot tell whether these control planes hold etcd data, so nothing is bootstrapped: " + strings.Join(unclear, "; ")
		}
		return etcdNone, "no control plane has etcd data"
	}
	// the facts with members to compare: a control plane whose etcd has no
	// leader holds data but cannot say whose cluster it is
	var listed, leaderless, starting []string
	for _, name := range withData {
		switch {
		case st.etcd[name].NoLeader:
			leaderless = append(leaderless, name)
		case st.etcd[name].Starting:
			starting = append(starting, name)
		default:
			listed = append(listed, name)
		}
	}
	if why := foreignVerdict(inv, st, want, withData, listed, inMaintenance); why != "" {
		return etcdForeign, why
	}
	if len(listed) == 0 && len(leaderless) == 0 {
		why := fmt.Sprintf("etcd is starting on the data of %s (its service Preparing, its data directory not empty, as on every boot): nothing is bootstrapped over its data; waiting for it to run", strings.Join(starting, ", "))
		if len(unclear) > 0 {
			why += "; these did not answer clearly: " + strings.Join(unclear, "; ")
		}
		return etcdUnclear, why
	}
	if len(listed) == 0 {
		why := fmt.Sprintf("etcd exists on %s but has no leader, so no quorum, and no member list answers: nothing is bootstrapped over its data; bring back the control planes that are down (etcd elects a leader once more than half of its members run), then run again", strings.Join(leaderless, ", "))
		if len(unclear) > 0 {
			why += "; these did not answer clearly: " + strings.Join(unclear, "; ")
		}
		return etcdUnclear, why
	}
	if len(unclear) > 0 {
		return etcdUnclear, "etcd exists on " + strings.Join(withData, ", ") + " but these control planes did not answer clearly: " + strings.Join(unclear, "; ")
	}
	return etcdOurs, fmt.Sprintf("etcd exists: %s report members [%s], all control planes of this inventory", strings.Join(listed, ", "), strings.Join(st.etcd[listed[0]].Members, " "))
}

func wasWere(n int) string {
	if n == 1 {
		return "was"
	}
	return "were"
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// bootstrapNode is the control plane devata bootstraps: the first by name.
func bootstrapNode(inv *inventory.Inventory) *inventory.Machine {
	cps := inv.ControlPlanes()
	slices.SortFunc(cps, func(a, b *inventory.Machine) int { return strings.Compare(a.Name, b.Name) })
	return cps[0]
}

// shareMember reports whether two member lists name a member with the same
// ID: views of one etcd cluster.
func shareMember(a, b etcdFact) bool {
	for name, id := range a.IDs {
		if other, ok := b.IDs[name]; ok && other == id && id != 0 {
			return true
		}
	}
	return false
}
