package plan

import (
	"slices"
	"strings"

	"devata.dev/devata/inventory"
)

// RolloutOrder is a group's rollout.order as the rollouts take it: the
// named machines one stage each, then the group's others together.
type RolloutOrder struct {
	Group string `json:"group"`
	// Order are the machines named, in their order.
	Order []string `json:"order"`
	// Rest are the group's machines not named: the last stage.
	Rest []string `json:"rest,omitempty"`
}

// RolloutOrders are inv's groups with a rollout.order, in inventory order.
func RolloutOrders(inv *inventory.Inventory) []RolloutOrder {
	var out []RolloutOrder
	for _, g := range inv.Groups {
		if len(g.Rollout.Order) == 0 {
			continue
		}
		o := RolloutOrder{Group: g.Name, Order: g.Rollout.Order}
		for i := range inv.Machines {
			if m := &inv.Machines[i]; slices.Contains(m.Groups, g.Name) && !slices.Contains(g.Rollout.Order, m.Name) {
				o.Rest = append(o.Rest, m.Name)
			}
		}
		out = append(out, o)
	}
	return out
}

// String is the order for people: "storage-3 → storage-1, then storage-2, storage-4".
func (o RolloutOrder) String() string {
	s := strings.Join(o.Order, " → ")
	if len(o.Rest) > 0 {
		s += ", then " + strings.Join(o.Rest, ", ")
	}
	return s
}
