package bootstrap

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// configure applies the desired config to every machine in maintenance mode,
// and, while no etcd cluster exists, to configured machines whose config
// differs (asking first when that reboots them). Once the cluster exists,
// differing configs are left to devata apply and its etcd gates.
func (s *Sequence) configure(ctx context.Context) (string, error) {
	v, _ := etcdVerdict(s.inv, s.st)
	var maint, live, rebooting []*inventory.Machine
	for i := range s.inv.Machines {
		m := &s.inv.Machines[i]
		_, differs := s.st.diff[m.Name]
		switch {
		case s.st.maintenance(m.Name):
			maint = append(maint, m)
		case !differs:
		case v == etcdOurs:
			s.say("    %s: applied config differs (%s): left to devata apply, which rolls out under etcd gates", m.Name, s.st.diff[m.Name].Summary())
		case s.st.dryErr[m.Name] != nil:
			return "", fmt.Errorf("%s: applied config differs and the dry run was refused: %w", m.Name, s.st.dryErr[m.Name])
		case s.st.dry[m.Name].Reboots():
			rebooting = append(rebooting, m)
		default:
			live = append(live, m)
		}
	}
	if len(rebooting) > 0 && !s.opts.Yes {
		var names []string
		for _, m := range rebooting {
			role := "worker"
			if m.IsControlPlane() {
				role = "running control plane"
			}
			names = append(names, m.Name+" ("+role+")")
		}
		if s.opts.Confirm == nil {
			return "", fmt.Errorf("%w: applying the desired config reboots %s and nothing confirmed it: rerun with --yes to proceed", ErrRefused, strings.Join(names, ", "))
		}
		if err := s.opts.Confirm(names); err != nil {
			return "", err
		}
	}
	if len(maint)+len(live)+len(rebooting) == 0 {
		return "nothing to configure: no machine is in maintenance mode", nil
	}
	all := append(append(slices.Clone(maint), live...), rebooting...)
	s.configured = all
	err := talosapi.ForEach(ctx, all, s.opts.Concurrency, s.opts.Wait+4*s.opts.Timeout, func(ctx context.Context, m *inventory.Machine) error {
		if s.st.maintenance(m.Name) {
			return s.applyMaintenance(ctx, m)
		}
		return s.applyRunning(ctx, m, s.st.dry[m.Name].Mode)
	})
	if err != nil && ctx.Err() != nil {
		// Applied configs stay applied and the machines keep rebooting into
		// them; the next run observes where each one got to.
		return "", fmt.Errorf("%w while configuring %s", ctx.Err(), names(all))
	}
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("configured %d %s: %s", len(all), plural(len(all), "machine", "machines"), names(all)), nil
}
