// Package demo tells devata's story on an embedded simulated fleet: the
// homelab example rendered and served by the sim in maintenance mode, then
// bootstrapped, checked, broken, applied and checked again, given a machine
// group and a hold, and rebuilt from a snapshot, each step printed. It owns the scenario; devata's commands run through
// Options.Devata, and nothing here touches a real machine.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/sim"
)

// Options are what the demo needs from the command that runs it.
type Options struct {
	// Out receives the story, Err the progress of building kube-apiserver.
	Out, Err io.Writer
	// Kubernetes runs a real kube-apiserver for the kubelet and cilium
	// checks; without it those checks are left out.
	Kubernetes bool
	// Devata runs one of devata's own commands in-process and returns its
	// exit code.
	Devata func(ctx context.Context, args []string) int
	// PrintRendered prints the rendered configs as devata validate does.
	PrintRendered func(w io.Writer, inv *inventory.Inventory, rendered []*render.Rendered)
	// DescribeFleet counts the inventory's machines by role as devata
	// validate's summary does.
	DescribeFleet func(inv *inventory.Inventory) string
}

// Run tells the story in a temporary directory it removes at the end.
func Run(ctx context.Context, opts Options) error {
	dir, err := os.MkdirTemp("", "devata-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	s := &scenario{Options: opts, dir: dir}
	defer s.close()
	fmt.Fprintln(s.Out, "devata demo: SIMULATED Talos machines on loopback; no real machine is touched.")
	steps := []func(context.Context) error{
		s.inventory, s.secrets, s.render, s.kubernetes, s.fleet, s.bootstrap, s.cilium,
		s.driftHealthy, s.faults, s.driftFaulty, s.apply, s.driftAfterApply,
		s.groups, s.recovery, s.driftRecovered,
	}
	for _, step := range steps {
		if err := step(ctx); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}
	fmt.Fprintln(s.Out, "\nEverything above ran against SIMULATED machines. Against a real cluster: devata validate, devata gen secrets, devata plan, devata bootstrap, then devata drift, devata apply or devata reconcile.")
	return nil
}

// scenario is the demo's state, passed from step to step.
type scenario struct {
	Options
	dir      string
	invPath  string
	inv      *inventory.Inventory
	bundle   *secrets.Bundle
	rendered []*render.Rendered
	kube     *simfleet.Kubernetes // nil without Kubernetes
	sim      *sim.Fleet
	// pinned are the flags every devata command of the demo gets.
	pinned   []string
	checks   string
	override *cncOverride
	cleanup  []func()
}

// onClose runs f when the demo ends, the last one registered first.
func (s *scenario) onClose(f func()) { s.cleanup = append(s.cleanup, f) }

func (s *scenario) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}

// devata prints a command line and runs it with the pinned flags.
func (s *scenario) devata(ctx context.Context, args ...string) int {
	fmt.Fprintf(s.Out, "\n$ devata %s\n", strings.Join(args, " "))
	return s.Devata(ctx, append(args, s.pinned...))
}

// syncKubelets has every simulated kubelet update its Node now.
func (s *scenario) syncKubelets(ctx context.Context) {
	if s.kube != nil {
		s.sim.SyncKubelets(ctx, s.kube.Client)
	}
}
