package membership

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	etcdres "github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/configview"
	"devata.dev/devata/internal/drain"
	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// The kinds of a removal's steps, in the order they run.
const (
	StepCordon     plan.Kind = "cordon"
	StepDrain      plan.Kind = "drain"
	StepEtcdLeave  plan.Kind = "etcd-leave"
	StepEtcdRemove plan.Kind = "etcd-remove-member"
	StepReset      plan.Kind = "reset"
	StepDeleteNode plan.Kind = "delete-node"
)

// byRemove is the command that takes a removal's steps.
const byRemove = "remove"

// Plan is what removing one orphan takes, as observed under the lock.
type Plan struct {
	Name string
	// ControlPlane: the machine is an etcd member.
	ControlPlane bool
	MemberID     uint64
	// Machine is how the machine's Talos API is dialed; nil when no
	// address is known. Reachable: it answered; Maintenance: it answered
	// unconfigured (already reset).
	Machine                *inventory.Machine
	Reachable, Maintenance bool
	// Node: its Kubernetes Node exists.
	Node bool
	// Steps are pending or done (not needed: Reason says why); a pending
	// one's Talosctl is the command that does the same by hand.
	Steps []plan.Step
	// Notes are what the operator should know before confirming.
	Notes []string
}

// Pending are the steps to run.
func (p *Plan) Pending() []plan.Step { return plan.WithStatus(p.Steps, plan.StatusPending) }

// Write prints the plan for people: the steps as devata plan writes
// them (plan.WriteSteps), each pending one with its command by hand.
func (p *Plan) Write(w io.Writer) {
	role := "worker"
	if p.ControlPlane {
		role = "control plane (etcd member " + etcdres.FormatMemberID(p.MemberID) + ")"
	}
	fmt.Fprintf(w, "remove %s, a %s: %d of %d steps pending\n", p.Name, role, len(p.Pending()), len(p.Steps))
	_ = plan.WriteSteps(w, p.Steps, true) // as the lines above: a terminal's error is not the plan's
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// NotOrphanError refuses to remove a machine the inventory still has.
type NotOrphanError struct{ Name, Inventory string }

func (e *NotOrphanError) Error() string {
	return fmt.Sprintf("%s is in the inventory %s: devata remove only removes machines the inventory no longer has; delete its entry (and commit it), then run devata remove %s again", e.Name, e.Inventory, e.Name)
}

// ErrNothingToRemove: no etcd member, Node or configured machine of that name.
var ErrNothingToRemove = errors.New("nothing to remove")

// Remover plans and runs the removal of one orphan.
type Remover struct {
	Inventory *inventory.Inventory
	Dialer    *talosapi.Dialer
	Kube      kubernetes.Interface
	// Timeout bounds one API call; Wait bounds each wait (the drain, etcd
	// agreeing, the machine coming back); Poll is how often a wait looks.
	Timeout, Wait, Poll time.Duration
	// Address is where the machine's Talos API is (host or host:port) when
	// the dial settings do not name it and its Node has no InternalIP.
	Address string
	// PowerOff halts the machine after the reset instead of rebooting it
	// into maintenance mode.
	PowerOff bool
	// Force evicts pods no controller owns as well (kubectl drain --force):
	// nothing recreates them, so without Force the plan refuses.
	Force bool
	// Say prints one line of progress; Heartbeat is how often a wait says
	// it still waits (heartbeat.Every when zero).
	Say       func(format string, args ...any)
	Heartbeat time.Duration
}

func (r *Remover) say(format string, args ...any) {
	if r.Say != nil {
		r.Say(format, args...)
	}
}

func (r *Remover) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.Timeout)
}

// Plan observes what removing name takes. It reads only.
func (r *Remover) Plan(ctx context.Context, name string) (*Plan, error) {
	if r.Inventory.Machine(name) != nil {
		return nil, &NotOrphanError{Name: name, Inventory: r.Inventory.Path}
	}
	p := &Plan{Name: name}
	members, err := ObserveMembers(ctx, r.Inventory, r.Dialer, r.Timeout)
	if err != nil && len(r.Inventory.ControlPlanes()) > 0 {
		return nil, fmt.Errorf("%w; devata remove decides from etcd's member list, so it changes nothing until a control plane answers", err)
	}
	if id, ok := members.IDs[name]; ok {
		p.ControlPlane, p.MemberID = true, id
	}
	var nodeIP string
	cctx, cancel := r.call(ctx)
	node, err := r.Kube.CoreV1().Nodes().Get(cctx, name, metav1.GetOptions{})
	cancel()
	switch {
	case err == nil:
		p.Node = true
		nodeIP = internalIP(node)
	case !notFound(err):
		return nil, fmt.Errorf("read Node %s: %w; nothing was changed", name, err)
	}
	p.Machine = r.machine(name, nodeIP, p.ControlPlane)
	if err := r.observeMachine(ctx, p); err != nil {
		return nil, err
	}
	if !p.ControlPlane && !p.Node && (!p.Reachable || p.Maintenance) {
		return nil, fmt.Errorf("%s: %w: no etcd member, no Node and no configured machine of that name", name, ErrNothingToRemove)
	}
	if p.ControlPlane {
		// the quorum rule before anything changes; it is asked again right
		// before the member goes
		if err := r.quorum(ctx, p); err != nil {
			return nil, err
		}
	}
	if p.Node {
		bare, err := r.unowned(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("%w; nothing was changed", err)
		}
		if len(bare) > 0 {
			if !r.Force {
				return nil, &UnownedPodsError{Node: name, Pods: bare}
			}
			p.Notes = append(p.Notes, fmt.Sprintf("--force: %d %s no controller owns will be deleted for good: %s", len(bare), plural(len(bare), "pod", "pods"), strings.Join(bare, ", ")))
		}
	}
	r.steps(p)
	if p.ControlPlane {
		stay := len(members.IDs) - 1
		if stay%2 == 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("etcd keeps %d members: with an even number one more failure costs as much quorum as with %d; add a control plane to the inventory to get back to an odd count", stay, stay-1))
		}
	}
	return p, nil
}

// observeMachine reads the machine to reset, when it has an address: that
// it is name (its member ID too, for a control plane), whether it answers
// and in maintenance mode, and the role it runs as.
func (r *Remover) observeMachine(ctx context.Context, p *Plan) error {
	name := p.Name
	if p.Machine == nil {
		p.Notes = append(p.Notes, fmt.Sprintf("no address for %s (no dial setting, no Node InternalIP): it is taken as gone, and not reset; pass --address to reset it", name))
		return nil
	}
	cctx, cancel := r.call(ctx)
	o := talosapi.Observe(cctx, r.Dialer, p.Machine)
	cancel()
	switch {
	case o.Err != nil:
		p.Notes = append(p.Notes, fmt.Sprintf("%s does not answer at %s (%v): it is taken as gone, and not reset", name, r.Dialer.Endpoint(p.Machine), talosapi.PlainError(o.Err)))
	case o.Maintenance:
		p.Reachable, p.Maintenance = true, true
	default:
		if err := identify(o, name, p.MemberID); err != nil {
			return fmt.Errorf("the machine at %s: %w; nothing was changed (pass --address with the machine's own address)", r.Dialer.Endpoint(p.Machine), err)
		}
		p.Reachable = true
		// its own status (EtcdStatus) names its member, leader or not
		if l := o.EtcdLocal; p.ControlPlane && l != nil && l.MemberID != 0 && l.MemberID != p.MemberID {
			return fmt.Errorf("the machine at %s runs etcd member %s, not %s's %s; nothing was changed", r.Dialer.Endpoint(p.Machine),
				etcdres.FormatMemberID(l.MemberID), name, etcdres.FormatMemberID(p.MemberID))
		}
		p.Machine.Role = inventory.RoleWorker
		if o.EtcdService != nil || p.ControlPlane {
			p.Machine.Role = inventory.RoleControlPlane
		}
		if !p.ControlPlane && o.EtcdService != nil && o.EtcdService.State == "Running" {
			p.Notes = append(p.Notes, name+" runs etcd but is not in etcd's member list: its reset leaves nothing behind in etcd")
		}
	}
	return nil
}

// steps fills the plan's steps from what it observed.
func (r *Remover) steps(p *Plan) {
	talosctl := r.Dialer.Talosctl
	pending := func(kind plan.Kind, what, why, manual string) plan.Step {
		return plan.Step{Kind: kind, Machine: p.Name, Status: plan.StatusPending, By: byRemove, Summary: what, Reason: why, Talosctl: []string{manual}}
	}
	done := func(kind plan.Kind, what, why string) plan.Step {
		return plan.Step{Kind: kind, Machine: p.Name, Status: plan.StatusDone, By: byRemove, Summary: what, Reason: why}
	}
	node := func(kind plan.Kind, what, manual string) {
		if !p.Node {
			p.Steps = append(p.Steps, done(kind, what, "no Node "+p.Name))
			return
		}
		p.Steps = append(p.Steps, pending(kind, what, "its Node exists", manual))
	}
	node(StepCordon, "mark Node "+p.Name+" unschedulable", "kubectl cordon "+p.Name)
	node(StepDrain, "evict its pods (DaemonSet and mirror pods stay), honouring PodDisruptionBudgets", "kubectl drain "+p.Name+" --ignore-daemonsets --delete-emptydir-data")
	if p.ControlPlane {
		switch {
		case p.Reachable && !p.Maintenance:
			p.Steps = append(p.Steps, pending(StepEtcdLeave,
				"EtcdLeaveCluster on "+p.Name+": it removes its own member, stops its etcd and deletes its data",
				"it is etcd member "+etcdres.FormatMemberID(p.MemberID)+" and answers, configured",
				talosctl(p.Machine)+" etcd leave"))
		default:
			p.Steps = append(p.Steps, pending(StepEtcdRemove,
				"EtcdRemoveMemberByID "+etcdres.FormatMemberID(p.MemberID)+" through a member that stays",
				"it is etcd member "+etcdres.FormatMemberID(p.MemberID)+" and cannot leave by itself (it does not answer, or answers in maintenance mode)",
				"talosctl -n <a control plane> etcd remove-member "+etcdres.FormatMemberID(p.MemberID)))
		}
	} else {
		p.Steps = append(p.Steps, done(StepEtcdLeave, "leave etcd", "not an etcd member"))
	}
	switch {
	case p.Reachable && !p.Maintenance:
		after := "reboots into maintenance mode"
		manual := " reset --graceful --wipe-mode system-disk --reboot"
		if r.PowerOff {
			after, manual = "halts", " reset --graceful --wipe-mode system-disk"
		}
		p.Steps = append(p.Steps, pending(StepReset,
			"Reset, graceful, the system disk wiped (user disks untouched); it "+after,
			"it answers, configured",
			talosctl(p.Machine)+manual))
	case p.Maintenance:
		p.Steps = append(p.Steps, done(StepReset, "reset the machine", "already in maintenance mode"))
	default:
		p.Steps = append(p.Steps, done(StepReset, "reset the machine", "the machine does not answer"))
	}
	node(StepDeleteNode, "delete Node "+p.Name, "kubectl delete node "+p.Name)
}

// machine is how the orphan is dialed: the dial settings' address for the
// name, else --address, else the Node's InternalIP.
func (r *Remover) machine(name, nodeIP string, cp bool) *inventory.Machine {
	m := &inventory.Machine{Name: name, Role: inventory.RoleWorker, Port: 50000}
	if cp {
		m.Role = inventory.RoleControlPlane
	}
	addr := r.Address
	if addr == "" {
		addr = nodeIP
	}
	if _, ok := r.Dialer.Override(name); !ok && addr == "" {
		return nil
	}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.Atoi(port); err == nil {
			addr, m.Port = host, n
		}
	}
	m.Address = addr
	return m
}

func internalIP(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// identify makes sure the machine that answered is the one to remove: its
// active config's hostname is name, or (a control plane) its etcd member
// ID is the member's. A reset of the wrong machine is not undone.
func identify(o *talosapi.Observation, name string, memberID uint64) error {
	if memberID != 0 && o.EtcdLocal != nil && o.EtcdLocal.MemberID == memberID {
		return nil
	}
	if len(o.Active) == 0 {
		return fmt.Errorf("its machine config could not be read (%v), so it cannot be told to be %s", o.ConfigErr, name)
	}
	cfg, err := configloader.NewFromBytes(o.Active)
	if err != nil {
		return fmt.Errorf("its machine config does not load (%v), so it cannot be told to be %s", err, name)
	}
	if h := configview.Hostname(cfg); h != name {
		return fmt.Errorf("its hostname is %q, not %s", h, name)
	}
	return nil
}

// Run runs the plan's pending steps in order and stops at the first that
// fails, saying what to do; rerunning plans again from what the cluster
// reports, so it continues where it stopped.
func (r *Remover) Run(ctx context.Context, p *Plan) error {
	for _, s := range p.Pending() {
		plan.Say(r.say, p.Name, "%s", s.Kind)
		var err error
		switch s.Kind {
		case StepCordon:
			err = r.cordon(ctx, p.Name)
		case StepDrain:
			err = r.drain(ctx, p.Name, p.Reachable && !p.Maintenance)
		case StepEtcdLeave:
			err = r.etcdLeave(ctx, p)
		case StepEtcdRemove:
			err = r.etcdRemove(ctx, p)
		case StepReset:
			err = r.reset(ctx, p)
		case StepDeleteNode:
			err = r.deleteNode(ctx, p.Name)
		}
		if err != nil {
			next := "fix that, then run devata remove " + p.Name + " again: it continues from what the cluster reports"
			if len(s.Talosctl) > 0 {
				next += " (by hand: " + strings.Join(s.Talosctl, "; ") + ")"
			}
			return fmt.Errorf("%s %s: %w\n%s", p.Name, s.Kind, err, next)
		}
	}
	return nil
}

// cordon marks the Node unschedulable; it is deleted in the end, so it
// carries no mark for an uncordon.
func (r *Remover) cordon(ctx context.Context, name string) error {
	_, err := r.drainer().Cordon(ctx, name, false)
	if errors.Is(err, drain.ErrNoNode) {
		return nil
	}
	return err
}

func (r *Remover) deleteNode(ctx context.Context, name string) error {
	cctx, cancel := r.call(ctx)
	defer cancel()
	err := r.Kube.CoreV1().Nodes().Delete(cctx, name, metav1.DeleteOptions{})
	if notFound(err) {
		return nil
	}
	return err
}

// quorum observes etcd over the inventory and asks gate.MayRemove, right
// before the member goes.
func (r *Remover) quorum(ctx context.Context, p *Plan) error {
	v := gate.ObserveEtcd(ctx, r.Inventory, r.Dialer, r.Timeout)
	return gate.MayRemove(v, p.Name)
}

func (r *Remover) etcdLeave(ctx context.Context, p *Plan) error {
	if err := r.quorum(ctx, p); err != nil {
		return err
	}
	c, err := r.Dialer.Client(ctx, p.Machine)
	if err != nil {
		return err
	}
	defer c.Close()
	// Talos retries the removal for up to five minutes while etcd answers
	// unhealthy (Client.LeaveCluster): the call gets the wait's bound.
	cctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	if err := c.EtcdLeaveCluster(cctx, &machine.EtcdLeaveClusterRequest{}); err != nil {
		return talosapi.PlainError(err)
	}
	return r.waitGone(ctx, p.Name)
}

func (r *Remover) etcdRemove(ctx context.Context, p *Plan) error {
	if err := r.quorum(ctx, p); err != nil {
		return err
	}
	members, err := ObserveMembers(ctx, r.Inventory, r.Dialer, r.Timeout)
	if err != nil {
		return err
	}
	if _, ok := members.IDs[p.Name]; !ok {
		return nil // gone since the plan
	}
	c, err := r.Dialer.Client(ctx, members.From)
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := c.EtcdRemoveMemberByID(cctx, &machine.EtcdRemoveMemberByIDRequest{MemberId: p.MemberID}); err != nil {
		return talosapi.PlainError(err)
	}
	return r.waitGone(ctx, p.Name)
}

// waitGone waits until every control plane of the inventory agrees on a
// member list without name.
func (r *Remover) waitGone(ctx context.Context, name string) error {
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, "every control plane to see etcd without "+name)
	defer beat.Stop()
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	for {
		v := gate.ObserveEtcd(wctx, r.Inventory, r.Dialer, r.Timeout)
		if len(v.Members) > 0 && !slices.Contains(v.Members, name) {
			r.say("    etcd members now: %s", strings.Join(v.Members, ", "))
			return nil
		}
		beat.Saw(v.Err().Error())
		if err := sleep(wctx, r.Poll); err != nil {
			return fmt.Errorf("after %s the control planes still do not agree that %s left: %v", r.Wait, name, v.Err())
		}
	}
}

func (r *Remover) reset(ctx context.Context, p *Plan) error {
	c, err := r.Dialer.Client(ctx, p.Machine)
	if err != nil {
		return err
	}
	defer c.Close()
	cctx, cancel := r.call(ctx)
	err = c.ResetGeneric(cctx, &machine.ResetRequest{Graceful: true, Reboot: !r.PowerOff, Mode: machine.ResetRequest_SYSTEM_DISK})
	cancel()
	if err != nil {
		return talosapi.PlainError(err)
	}
	if r.PowerOff {
		return r.waitUntil(ctx, p, "does not answer (halted)", func(o *talosapi.Observation) bool { return o.Err != nil })
	}
	return r.waitUntil(ctx, p, "is back in maintenance mode", func(o *talosapi.Observation) bool { return o.Maintenance })
}

func (r *Remover) waitUntil(ctx context.Context, p *Plan, what string, done func(*talosapi.Observation) bool) error {
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, p.Name+" after its reset: until it "+what)
	defer beat.Stop()
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	for {
		cctx, ccancel := r.call(wctx)
		o := talosapi.Observe(cctx, r.Dialer, p.Machine)
		ccancel()
		if done(o) {
			r.say("    %s %s", p.Name, what)
			return nil
		}
		switch {
		case o.Err != nil:
			beat.Saw("unreachable")
		default:
			beat.Saw("stage " + o.Stage)
		}
		if err := sleep(wctx, r.Poll); err != nil {
			return fmt.Errorf("after %s %s has not come to where it %s", r.Wait, p.Name, what)
		}
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// UnownedPodsError refuses a drain that would delete pods no controller
// owns: nothing would recreate them (kubectl drain refuses them too).
type UnownedPodsError struct {
	Node string
	Pods []string
}

func (e *UnownedPodsError) Error() string {
	return fmt.Sprintf("Node %s runs %d %s no controller owns (%s): a drain deletes them for good; recreate them under a Deployment, StatefulSet or Job first, or rerun with --force to delete them; nothing was changed",
		e.Node, len(e.Pods), plural(len(e.Pods), "pod", "pods"), strings.Join(e.Pods, ", "))
}
