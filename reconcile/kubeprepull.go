package reconcile

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"

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
