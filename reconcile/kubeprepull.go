package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Before the first component of a Kubernetes version change moves, every
// machine that moves one pulls its new images, as talosctl upgrade-k8s
// does (v1.14.1 pkg/cluster/kubernetes/talos_managed.go prePullImages):
// through MachineService.ImagePull, kube-apiserver, kube-controller-manager
// and kube-scheduler into the CRI namespace on the control planes, the
// kubelet into the system namespace on every machine; a machine whose
// Talos answers Unimplemented is skipped, as talosctl skips it. A static
// pod or kubelet restarted on an image that is already there is down for
// seconds, not for a download. Pulls go to every machine (a few at once)
// and all of them are tried; any that fails stops the rollout before a
// component moved, naming each machine and image.

// In devata apply the plan is the fleet's, and these pulls are every
// moving machine's before the first move. The loop plans one machine at a
// time; before the first change of a version change (no note for its
// version yet: kubemanifests_note.go) it plans the machines it owns as
// apply would and pulls on every one that will move, then writes the
// note, then changes; held machines are skipped and said. A later
// change (the note names its version) pulls its own machine's images
// again before it: an image already there is not downloaded again, so
// that costs a look, and it covers a machine that was held or unreachable
// at the first move.

// beforeMoves is what comes before a rollout's first Kubernetes
// component moves: the pulls, then the note that the bootstrap manifests
// are due; a failed pull stops the rollout before any component moved.
func (r *Rollout) beforeMoves(ctx context.Context, actions []Action) error {
	to := movesTo(actions)
	if to == "" {
		return nil
	}
	n := r.notes()
	n.first.Lock()
	first := false
	if r.fleet != nil {
		rctx, cancel := context.WithTimeout(ctx, r.Timeout)
		due, _ := n.due(rctx, r.Kube)
		cancel()
		first = due != to
	}
	if first {
		defer n.first.Unlock() // one first move: the others wait for its note
		actions = r.withFleet(ctx, to, actions)
	} else {
		n.first.Unlock()
	}
	if err := r.prePull(ctx, actions); err != nil {
		return err
	}
	mctx, cancel := context.WithTimeout(ctx, r.Timeout)
	n.mark(mctx, r.Kube, to, r.say)
	cancel()
	return nil
}

// withFleet is the loop's machines that move toward to, as its fleet's
// plan has them, and actions; it says the held ones.
func (r *Rollout) withFleet(ctx context.Context, to string, actions []Action) []Action {
	moving, held := r.fleet(ctx)
	r.say("  the first move toward Kubernetes %s: every machine that moves pulls its images first, as devata apply and talosctl upgrade-k8s do", to)
	for _, a := range held {
		why := a.HeldBy
		if why == "" {
			why = "its Kubernetes components wait"
		}
		r.say("    %s: held (%s): not pulled now; it pulls its images before its own change", a.Machine.Name, why)
	}
	// the fleet's plan of a machine moves all its components; the loop's
	// plan of this one machine only what may move now
	out := slices.Clone(moving)
	for _, a := range actions {
		if !slices.ContainsFunc(out, func(b Action) bool { return b.Machine.Name == a.Machine.Name }) {
			out = append(out, a)
		}
	}
	return out
}

// fleetMoves plans the machines the reconciler owns as devata apply
// plans a fleet, for the pulls before the first move: the actions that
// move Kubernetes components and the held ones. Nothing when the plan
// fails or refuses the version change (the change itself then says why).
func (r *Reconciler) fleetMoves(d *Desired) func(context.Context) (moving, held []Action) {
	return func(ctx context.Context) (moving, held []Action) {
		var owned []*inventory.Machine
		for i := range d.Inventory.Machines {
			if m := &d.Inventory.Machines[i]; r.Shard.Owns(m) {
				owned = append(owned, m)
			}
		}
		plan, err := r.Changes.Planner(d.Inventory, d.Configs.Held(), d.Configs.For).Plan(ctx, owned)
		if err != nil || plan.Kubernetes == nil || plan.Kubernetes.Refused != "" {
			return nil, nil
		}
		for _, a := range plan.Actions {
			switch {
			case a.Kubernetes != nil:
				moving = append(moving, a)
			case a.Held:
				held = append(held, a)
			}
		}
		return moving, held
	}
}

// prePullConcurrency bounds the machines pulling at once.
const prePullConcurrency = 4

// prePull pulls the new images of every Kubernetes phase of actions.
func (r *Rollout) prePull(ctx context.Context, actions []Action) error {
	type job struct {
		a      Action
		images []string
		ns     []common.ContainerdNamespace
	}
	var jobs []job
	for _, a := range actions {
		if a.Kubernetes == nil {
			continue
		}
		j := job{a: a}
		for _, ph := range a.Kubernetes.Phases {
			if ph.Component == "" || ph.Image == "" {
				continue
			}
			ns := common.ContainerdNamespace_NS_CRI
			if ph.Component == talosapi.Kubelet {
				ns = common.ContainerdNamespace_NS_SYSTEM
			}
			j.images, j.ns = append(j.images, ph.Image), append(j.ns, ns)
		}
		if len(j.images) > 0 {
			jobs = append(jobs, j)
		}
	}
	if len(jobs) == 0 {
		return nil
	}
	machines := fmt.Sprintf("%d machines", len(jobs))
	if len(jobs) == 1 {
		machines = jobs[0].a.Machine.Name
	}
	r.say("  pre-pulling the new Kubernetes images on %s (MachineService.ImagePull, as talosctl upgrade-k8s)", machines)
	var (
		mu   sync.Mutex
		errs []string
		wg   sync.WaitGroup
		sem  = make(chan struct{}, prePullConcurrency)
	)
	for _, j := range jobs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			line, err := r.pullOn(ctx, j.a, j.images, j.ns)
			mu.Lock() // r.Say writes to one stream: one line at a time
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err.Error())
			} else {
				r.say("%s", line)
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return fmt.Errorf("pre-pulling the new Kubernetes images failed, and no component was changed: %s; check the machines' registry access (talosctl -n NODE image pull IMAGE), then run again", strings.Join(errs, "; "))
	}
	return nil
}

// pullOn pulls images on one machine, one after the other, and returns
// the line that says what it did.
func (r *Rollout) pullOn(ctx context.Context, a Action, images []string, ns []common.ContainerdNamespace) (string, error) {
	m := a.Machine
	dctx, cancel := context.WithTimeout(ctx, r.Timeout)
	c, err := r.Dialer.Client(dctx, m)
	cancel()
	if err != nil {
		return "", fmt.Errorf("%s: %w", m.Name, err)
	}
	defer c.Close()
	for i, img := range images {
		pctx, cancel := context.WithTimeout(ctx, r.pullTimeout())
		err := c.ImagePull(pctx, ns[i], img) //nolint:staticcheck // talosctl upgrade-k8s' call; it exists from Talos 1.11 to 1.14
		cancel()
		switch {
		case client.StatusCode(err) == codes.Unimplemented:
			return fmt.Sprintf("    %s: image pull not implemented by its Talos: skipped (as talosctl does)", m.Name), nil
		case err != nil:
			return "", fmt.Errorf("%s: pull %s: %w", m.Name, img, err)
		}
	}
	return fmt.Sprintf("    %s: pulled %s", m.Name, strings.Join(tags(images), ", ")), nil
}

// tags shortens image references to repository basename:tag.
func tags(images []string) []string {
	out := make([]string, len(images))
	for i, img := range images {
		out[i] = img[strings.LastIndex(img, "/")+1:]
	}
	return out
}
