package inventory

import (
	"fmt"
	"slices"
	"strings"
	"time"
	_ "time/tzdata" // a window's time zone must load in a container image without /usr/share/zoneinfo
)

// Hold keeps apply, upgrade and reconcile from changing a machine: it is
// observed and reported, never written to (issue 36: Omni's node lock).
type Hold struct {
	Reason string `required:"true" yaml:"reason" json:"reason" doc:"Why the machine is held, shown in every plan and report, e.g. 'disk replacement, ticket OPS-123'."`
}

// MaintenanceWindow is a weekly time span in which devata reconcile may
// make disruptive changes (those that reboot a machine, and upgrades).
type MaintenanceWindow struct {
	Name     string   `required:"true" yaml:"name" json:"name" doc:"Window name (DNS-1123 label), as plans, reports and machines[].maintenanceWindows name it."`
	Days     []string `yaml:"days" json:"days" doc:"Days on which the window opens: mon, tue, wed, thu, fri, sat, sun. Default every day."`
	Start    string   `required:"true" yaml:"start" json:"start" doc:"Opening time, HH:MM on a 24-hour clock in timeZone, e.g. 02:00."`
	Duration string   `required:"true" yaml:"duration" json:"duration" doc:"How long the window stays open once opened, 1m to 24h, e.g. 3h or 90m."`
	TimeZone string   `yaml:"timeZone" json:"timeZone" doc:"IANA time zone of start, e.g. Europe/Berlin. Default UTC."`
}

var weekdays = []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

// window is a validated MaintenanceWindow.
type window struct {
	name      string
	days      [7]bool
	hour, min int
	dur       time.Duration
	loc       *time.Location
}

// problem is one fault of a MaintenanceWindow, by the field written.
type problem struct {
	field string
	err   error
}

// parse checks w and returns every fault it has.
func (w MaintenanceWindow) parse() (window, []problem) {
	out := window{name: w.Name, loc: time.UTC}
	var probs []problem
	if len(w.Days) == 0 {
		out.days = [7]bool{true, true, true, true, true, true, true}
	}
	for i, d := range w.Days {
		n := slices.Index(weekdays, strings.ToLower(d))
		if n < 0 {
			probs = append(probs, problem{fmt.Sprintf("days[%d]", i), fmt.Errorf("%q is not a day: write mon, tue, wed, thu, fri, sat or sun", d)})
			continue
		}
		out.days[n] = true
	}
	if t, err := time.Parse("15:04", w.Start); err != nil {
		probs = append(probs, problem{"start", fmt.Errorf("%q is not a time HH:MM on a 24-hour clock, e.g. 02:00", w.Start)})
	} else {
		out.hour, out.min = t.Hour(), t.Minute()
	}
	var err error
	out.dur, err = time.ParseDuration(w.Duration)
	if err != nil || out.dur < time.Minute || out.dur > 24*time.Hour {
		probs = append(probs, problem{"duration", fmt.Errorf("%q is not a duration from 1m to 24h, e.g. 3h or 90m", w.Duration)})
	}
	if w.TimeZone != "" {
		out.loc, err = time.LoadLocation(w.TimeZone)
		if err != nil || w.TimeZone == "Local" {
			probs = append(probs, problem{"timeZone", fmt.Errorf("%q is not an IANA time zone, e.g. Europe/Berlin or UTC", w.TimeZone)})
		}
	}
	return out, probs
}

// at returns, for the instant t, whether the window is open (and until
// when) or else when it opens next.
func (w window) at(t time.Time) (open bool, until, next time.Time) {
	local := t.In(w.loc)
	// a window that opened yesterday may still be open (it can span midnight)
	for d := -1; d <= 7; d++ {
		day := time.Date(local.Year(), local.Month(), local.Day()+d, w.hour, w.min, 0, 0, w.loc)
		if !w.days[day.Weekday()] {
			continue
		}
		end := day.Add(w.dur)
		if !t.Before(day) && t.Before(end) {
			return true, end, time.Time{}
		}
		if day.After(t) && (next.IsZero() || day.Before(next)) {
			next = day
		}
	}
	return false, time.Time{}, next
}

// WindowState is what a machine's maintenance windows allow at one instant.
type WindowState struct {
	// Any is false when the machine has no windows: disruptive changes may
	// be made at any time.
	Any bool
	// Open names the window open now ("" when none is).
	Open  string
	Until time.Time
	// Next names the window that opens next and when, while none is open.
	Next   string
	NextAt time.Time
}

// Allows says whether a disruptive change may be made now.
func (s WindowState) Allows() bool { return !s.Any || s.Open != "" }

// String says it as plans print it.
func (s WindowState) String() string {
	switch {
	case !s.Any:
		return "no maintenance window: any time"
	case s.Open != "":
		return fmt.Sprintf("maintenance window %s open until %s", s.Open, s.Until.Format("Mon 15:04 MST"))
	case s.Next == "":
		return "no maintenance window opens"
	}
	return fmt.Sprintf("waits for maintenance window %s, which opens %s", s.Next, s.NextAt.Format("Mon 2006-01-02 15:04 MST"))
}

// ActiveHold is what holds m: its own hold, else the first of its
// groups' (its reason naming the group); nil when nothing does.
func (m *Machine) ActiveHold() *Hold {
	if m.Hold != nil {
		return m.Hold
	}
	return m.groupHold
}

// WindowsOf returns the maintenance windows that apply to m: the ones its
// maintenanceWindows name, else those its groups name, else all of the
// cluster's.
func (inv *Inventory) WindowsOf(m *Machine) []MaintenanceWindow {
	names := m.MaintenanceWindows
	if len(names) == 0 {
		names = m.groupWindows
	}
	if len(names) == 0 {
		return inv.Cluster.MaintenanceWindows
	}
	var out []MaintenanceWindow
	for _, w := range inv.Cluster.MaintenanceWindows {
		if slices.Contains(names, w.Name) {
			out = append(out, w)
		}
	}
	return out
}

// WindowAt is what m's maintenance windows allow at t. The windows were
// validated when the inventory was loaded; one that does not parse is
// taken as closed, never as open.
func (inv *Inventory) WindowAt(m *Machine, t time.Time) WindowState {
	ws := inv.WindowsOf(m)
	s := WindowState{Any: len(ws) > 0}
	for _, mw := range ws {
		w, probs := mw.parse()
		if len(probs) > 0 {
			continue
		}
		open, until, next := w.at(t)
		switch {
		case open && (s.Open == "" || until.After(s.Until)):
			s.Open, s.Until = w.name, until
		case !open && !next.IsZero() && (s.Next == "" || next.Before(s.NextAt)):
			s.Next, s.NextAt = w.name, next
		}
	}
	if s.Open != "" {
		s.Next, s.NextAt = "", time.Time{}
	}
	return s
}

// validateWindows checks the cluster's maintenance windows.
func (v *validator) validateWindows(c *Cluster) {
	seen := map[string]string{}
	for i, w := range c.MaintenanceWindows {
		p := fmt.Sprintf("cluster.maintenanceWindows[%d]", i)
		if v.dns1123Label(p+".name", w.Name) {
			if first, dup := seen[w.Name]; dup {
				v.errorf(p+".name", "duplicate window name %q (also %s)", w.Name, first)
			}
			seen[w.Name] = p
		}
		_, probs := w.parse()
		for _, pr := range probs {
			v.errorf(p+"."+pr.field, "%v", pr.err)
		}
	}
}

// validateHold checks a machine's hold and the window names it gives.
func (v *validator) validateHold(p string, m *Machine) {
	v.validateHoldAndWindows(p, m.Hold, m.MaintenanceWindows)
}

// validateHoldAndWindows checks a machine's or a group's hold and the
// window names it gives.
func (v *validator) validateHoldAndWindows(p string, hold *Hold, windows []string) {
	if hold != nil && strings.TrimSpace(hold.Reason) == "" && !v.d.bad[p+".hold"] {
		v.errorf(p+".hold.reason", "required: say why it is held (plans and reports show it), e.g. 'disk replacement, ticket OPS-123'")
	}
	for i, name := range windows {
		if !slices.ContainsFunc(v.inv.Cluster.MaintenanceWindows, func(w MaintenanceWindow) bool { return w.Name == name }) {
			names := make([]string, 0, len(v.inv.Cluster.MaintenanceWindows))
			for _, w := range v.inv.Cluster.MaintenanceWindows {
				names = append(names, w.Name)
			}
			msg := fmt.Sprintf("no window %q in cluster.maintenanceWindows", name)
			if near := Nearest(name, names); near != "" {
				msg += fmt.Sprintf(": did you mean %q?", near)
			} else {
				msg += ": declare it there, or remove it here"
			}
			v.errorf(fmt.Sprintf("%s.maintenanceWindows[%d]", p, i), "%s", msg)
		}
	}
}
