package bootstrap

import (
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
)

// Contract is the Talos config contract a plan's configs are rendered
// for: the oldest release a machine runs, as each answered (Version), or
// cluster.talosVersion when none runs an older one or none answered. A
// machine that runs an older release than cluster.talosVersion is sent a
// config of its own release's contract until it is upgraded (bootstrap
// Desired.For), so that Talos never refuses a document or field it does not
// know; a machine in maintenance mode installs cluster.talosVersion's.
type Contract struct {
	// Talos is the release whose contract the oldest config follows,
	// "1.13"; Target is cluster.talosVersion.
	Talos  string `json:"talos"`
	Target string `json:"target"`
	// Reason says why, naming the machines that decided it.
	Reason string `json:"reason"`
	// Older are the machines that run an older release than Target, each
	// with the release it runs; their configs follow that release.
	Older []ContractMachine `json:"older,omitempty"`
}

// ContractMachine is a machine whose config follows an older release.
type ContractMachine struct {
	Machine string `json:"machine"`
	Runs    string `json:"runs"`
	Talos   string `json:"talos"`
}

// String is the contract line of the text plan and the runbook.
func (c Contract) String() string {
	return fmt.Sprintf("configs rendered for the Talos %s config contract: %s", c.Talos, c.Reason)
}

// contractOf decides the contract from what the machines reported.
func contractOf(inv *inventory.Inventory, st *fleetState) Contract {
	target := inv.Cluster.TalosVersion
	tm, ok := talos.Minor(target)
	c := Contract{Target: target, Talos: strings.TrimPrefix(target, "v")}
	if ok {
		c.Talos = fmt.Sprintf("1.%d", tm)
	}
	answered := 0
	for i := range inv.Machines {
		m := &inv.Machines[i]
		o := st.obs[m.Name]
		if o == nil || o.Err != nil || o.Maintenance || o.Version == "" {
			continue
		}
		answered++
		rm, rok := talos.Minor(o.Version)
		if !ok || !rok || rm >= tm || rm < talos.OldestMinor {
			continue
		}
		c.Older = append(c.Older, ContractMachine{Machine: m.Name, Runs: o.Version, Talos: fmt.Sprintf("1.%d", rm)})
	}
	switch {
	case len(c.Older) > 0:
		oldest := slices.MinFunc(c.Older, func(a, b ContractMachine) int {
			am, _ := talos.Minor(a.Runs)
			bm, _ := talos.Minor(b.Runs)
			return am - bm
		})
		c.Talos = oldest.Talos
		var runs []string
		for _, o := range c.Older {
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
