package reconcile

import (
	"fmt"
	"time"

	"devata.dev/devata/inventory"
)

// The values of Action.HeldBy.
const (
	// HeldByHold: the inventory holds the machine (machines[].hold).
	HeldByHold = "hold"
	// HeldByWindow: a disruptive change waits for a maintenance window.
	HeldByWindow = "window"
)

// restrain turns a change the inventory does not allow now into a held
// skip that still says what it would do: a held machine is never changed
// (issue 36), and with Windows a change that reboots or upgrades waits for
// its maintenance window. The diff and evidence stay, so plans and reports
// show what waits, and for what.
func (p *Planner) restrain(m *inventory.Machine, a Action) Action {
	if a.Kind != KindApply && a.Kind != KindUpgrade && a.Kind != KindJoin {
		return a
	}
	if h := m.ActiveHold(); h != nil && !p.IgnoreHold[m.Name] {
		a.Reason = fmt.Sprintf("held by the inventory (%s), not changed; it would %s: %s. Release the hold in the inventory, or at the console: devata apply --machines %s --ignore-hold",
			h.Reason, a.Kind, a.Reason, m.Name)
		a.Kind, a.Held, a.HeldBy = KindSkip, true, HeldByHold
		return a
	}
	if !p.Windows || !(a.Reboots || a.Kind == KindUpgrade) {
		return a
	}
	now := time.Now
	if p.Now != nil {
		now = p.Now
	}
	w := p.Inventory.WindowAt(m, now())
	a.Window = w
	if w.Allows() {
		return a
	}
	a.Reason = fmt.Sprintf("%s; it would %s (disruptive: %s): %s", w, a.Kind, disruption(a), a.Reason)
	a.Kind, a.Held, a.HeldBy = KindSkip, true, HeldByWindow
	return a
}

// disruption says why a change counts as disruptive.
func disruption(a Action) string {
	if a.Kind == KindUpgrade {
		return "an upgrade reboots the machine"
	}
	return "it reboots the machine"
}

// Held returns the actions the inventory holds back: held machines and
// changes waiting for a maintenance window.
func (p *Plan) Held() []Action {
	var out []Action
	for _, a := range p.Actions {
		if a.HeldBy != "" {
			out = append(out, a)
		}
	}
	return out
}
