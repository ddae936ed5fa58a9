package machines

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/talosapi"
)

func checkEtcd(_ context.Context, t *target.Target) []drift.Result {
	if r, ok := unreachable(t); ok {
		return []drift.Result{r}
	}
	o, name := t.Obs, t.Machine.Name
	if o.EtcdService != nil && o.Etcd == nil && errors.Is(o.EtcdErr, talosapi.ErrEtcdNotRunning) {
		// observed, not unknown: the service says etcd does not run here
		next := t.TalosctlFor("service etcd") + "; " + t.TalosctlFor("logs etcd")
		if o.WaitingForEtcd() {
			next = "bootstrap the cluster (devata bootstrap) if no control plane has etcd yet, else check why it does not join: " + next
		}
		return []drift.Result{drift.Drifted("etcd does not run on "+name+": service etcd "+o.EtcdService.State+" ("+o.EtcdService.Event+")", "etcd running, a member", "service etcd "+o.EtcdService.State).
			WithEvidence("ServiceList etcd: " + o.EtcdService.State + ", " + o.EtcdService.Event).WithNext(next)}
	}
	if errors.Is(o.EtcdErr, talosapi.ErrEtcdNoLeader) {
		// observed, not unknown: etcd runs here and says it has no leader
		evidence := []string{"EtcdMemberList: " + o.EtcdErr.Error()}
		if l := o.EtcdLocal; l != nil {
			evidence = append(evidence, fmt.Sprintf("EtcdStatus: member %s, leader %x, errors [%s]", etcdres.FormatMemberID(l.MemberID), l.Leader, strings.Join(l.Errors, "; ")))
		}
		return []drift.Result{drift.Drifted("etcd runs on "+name+" but has no leader: etcd has no quorum (more than half of its members are down), or is electing a leader", "etcd with a leader", "no leader").
			WithEvidence(evidence...).
			WithNext("bring back the control planes whose etcd is down (the etcd check on each says which); a member alone cannot elect a leader. Until then the Kubernetes API does not answer; devata backup etcd still takes a snapshot from this member: " + t.TalosctlFor("etcd status"))}
	}
	if errors.Is(o.EtcdErr, talosapi.ErrEtcdLearner) {
		// observed, not unknown: etcd runs here as a learner
		evidence := []string{"EtcdMemberList: " + o.EtcdErr.Error()}
		if l := o.EtcdLocal; l != nil {
			evidence = append(evidence, fmt.Sprintf("EtcdStatus: member %s, learner, leader %x", etcdres.FormatMemberID(l.MemberID), l.Leader))
		}
		return []drift.Result{drift.Drifted("etcd on "+name+" runs as a learner, not yet promoted: it joined and is catching up", "a voting etcd member", "learner").
			WithEvidence(evidence...).
			WithNext("wait: Talos promotes it once it has caught up with the leader (" + t.TalosctlFor("service etcd") + "); if it stays a learner, read " + t.TalosctlFor("logs etcd"))}
	}
	if o.EtcdErr != nil && o.Etcd == nil {
		return []drift.Result{drift.Unknown(o.EtcdErr, t.TalosctlFor("service etcd")+"; "+t.TalosctlFor("etcd members"))}
	}
	e := o.Etcd
	want := slices.Clone(t.ControlPlanes)
	slices.Sort(want)
	got := slices.Clone(e.Members)
	slices.Sort(got)
	evidence := []string{fmt.Sprintf("etcd members [%s], leader %x", strings.Join(got, " "), e.Leader)}
	var problems []string
	if !slices.Contains(e.Members, name) {
		problems = append(problems, name+" is not an etcd member")
	}
	if o.EtcdErr != nil {
		problems = append(problems, o.EtcdErr.Error())
	}
	if len(e.Errors) > 0 {
		problems = append(problems, "etcd reports: "+strings.Join(e.Errors, "; "))
	}
	if o.EtcdErr == nil && e.Leader == 0 {
		problems = append(problems, "no etcd leader")
	}
	if quorum := len(want)/2 + 1; len(got) < quorum {
		problems = append(problems, fmt.Sprintf("%d of %d members: below quorum (%d)", len(got), len(want), quorum))
	}
	next := t.TalosctlFor("etcd members") + "; " + t.TalosctlFor("etcd status")
	if !slices.Equal(got, want) {
		problems = append(problems, fmt.Sprintf("members [%s], control planes [%s]", strings.Join(got, " "), strings.Join(want, " ")))
		for _, orphan := range slices.DeleteFunc(slices.Clone(got), func(m string) bool { return slices.Contains(want, m) }) {
			// an orphan: the loop never removes a member on its own
			problems = append(problems, "etcd member "+orphan+" is not in the inventory")
			next = fmt.Sprintf("if %s is gone for good: %s while it runs, else %s; or add %s back to the inventory",
				orphan, "talosctl -n "+orphan+" etcd leave", t.TalosctlFor("etcd remove-member "+etcdres.FormatMemberID(e.IDs[orphan])), orphan)
		}
	}
	if len(e.Learners) > 0 {
		var ls []string
		for _, l := range e.Learners {
			if l == "" {
				l = "(unnamed: its etcd has not started)"
			}
			ls = append(ls, l)
		}
		problems = append(problems, "learners not yet promoted: "+strings.Join(ls, " "))
	}
	if len(problems) == 0 {
		return []drift.Result{drift.InSync(evidence...)}
	}
	return []drift.Result{drift.Drifted(strings.Join(problems, "; "), "members ["+strings.Join(want, " ")+"]", "members ["+strings.Join(got, " ")+"]").
		WithEvidence(evidence...).WithNext(next)}
}
