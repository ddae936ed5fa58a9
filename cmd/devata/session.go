package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/inventory"
	"devata.dev/devata/netcheck"
	"devata.dev/devata/provenance"
	"devata.dev/devata/render"
	"devata.dev/devata/talosapi"

	"devata.dev/devata/internal/termsafe"
)

// session is what the commands that talk to machines share: the validated
// inventory, each machine's rendered config, a dialer and, when configured, a
// Kubernetes client. Nothing is sent anywhere before it is complete.
type session struct {
	inv *inventory.Inventory
	// only are the machines the run is limited to, by name (--machines
	// takes names or addresses); empty means all.
	only    []string
	desired *render.Desired
	dialer  *talosapi.Dialer
	kube    kubernetes.Interface
	exec    netcheck.Execer // pods/exec on kube's cluster
}

// openSession loads and validates everything a run needs; only, when given,
// limits rendering to those machines. A lean session (drift over more than
// bootstrap.LeanAbove machines) holds no configs, only the means to render them. Any
// failure is exit 2: the run could not start.
//
// It stops, exit 2, once ctx is done (Ctrl-C while a large inventory is
// loaded and rendered).
func (a *app) openSession(ctx context.Context, leanOK bool, only ...string) (*session, error) {
	inv, err := inventory.LoadContext(ctx, a.settings.Inventory)
	if interrupted(err) {
		return nil, exitWith(exitTrouble, fmt.Errorf("%w; nothing was sent to any machine", err))
	}
	if err != nil {
		fmt.Fprintln(a.streams.Err, err)
		return nil, exitWith(exitTrouble, fmt.Errorf("%s is invalid: nothing was sent to any machine; run devata validate", a.settings.Inventory))
	}
	a.printWarnings(inv)
	if only, err = inv.Resolve(only); err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	bundle, err := a.loadSecrets(inv.SecretsPath())
	if err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	s := &session{inv: inv, only: only}
	// Every config is rendered and validated now, before anything is sent.
	s.desired, err = render.DesiredOf(ctx, inv, bundle, only, leanOK)
	if interrupted(err) {
		return nil, exitWith(exitTrouble, fmt.Errorf("%w; nothing was sent to any machine", err))
	}
	if err != nil {
		fmt.Fprintln(a.streams.Err, err)
		return nil, exitWith(exitTrouble, fmt.Errorf("rendering failed: nothing was sent to any machine; run devata validate"))
	}
	tc, err := talosapi.LoadTalosconfig(a.settings.Talosconfig)
	if err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	if s.dialer, err = a.newDialer(tc); err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	names := make(map[string]bool, len(inv.Machines))
	for i := range inv.Machines {
		names[inv.Machines[i].Name] = true
	}
	for name := range a.settings.Dial {
		if !names[name] {
			a.log.Warn("dial override for a machine not in the inventory", "machine", name)
		}
	}
	if s.kube, s.exec, err = a.sessionKubeClients(inv); err != nil {
		return nil, exitWith(exitTrouble, err)
	}
	return s, nil
}

// dialOptions are the talosctl-style choices of context and endpoints; a
// talosconfig named by path is read again when it changes (Talos renews a
// pod's kubernetesTalosAPIAccess certificate every few hours).
func (a *app) dialOptions() []talosapi.DialOption {
	return []talosapi.DialOption{talosapi.WithContext(a.settings.Context), talosapi.WithEndpoints(a.settings.Endpoints...), talosapi.WithReload(a.settings.Talosconfig)}
}

// newDialer reaches the inventory's machines as the settings say: the
// talosconfig context, the endpoints and the dial overrides.
func (a *app) newDialer(tc *clientconfig.Config) (*talosapi.Dialer, error) {
	return talosapi.NewDialer(tc, a.settings.Dial, a.dialOptions()...)
}

// kubeClients are the kubeconfig's API client and pods/exec transport.
func kubeClients(kubeconfig string) (kubernetes.Interface, netcheck.Execer, error) {
	cfg, err := talosapi.KubeConfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	return kubeClientsFor(cfg)
}

func kubeClientsFor(cfg *rest.Config) (kubernetes.Interface, netcheck.Execer, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	ex, err := netcheck.NewPodsExec(cfg)
	if err != nil {
		return nil, nil, err
	}
	return kube, ex, nil
}

// fleetCheck is every check devata drift knows, for one pass over inv: the
// machine checks and, on the same target, the other families'. Build one
// per pass: what a pass reads once (the Kubernetes side) it keeps per Run.
func (a *app) fleetCheck(inv *inventory.Inventory, desired map[string][]byte, d *talosapi.Dialer, kube kubernetes.Interface, ex netcheck.Execer) *checks.FleetCheck {
	return &checks.FleetCheck{
		Inventory: inv, Desired: desired, Dialer: d, Kube: kube,
		Families:    checks.Families(checks.Options{Exec: ex, Certs: a.certOptions(inv, d)}),
		Concurrency: a.settings.Concurrency, Timeout: a.settings.Timeout,
	}
}

// reportHeader is a report's header for inv, with the inventory's
// provenance (its sha256 and, in Git, the commit); the pass adds its
// machines (checks.FleetCheck.Report). A Git that does not answer is a
// warning: the report goes on without the commit.
func (a *app) reportHeader(ctx context.Context, inv *inventory.Inventory) drift.Header {
	return drift.Header{Cluster: inv.Cluster.Name, Inventory: inv.Path, Simulated: a.settings.Simulated, Provenance: a.inventoryProvenance(ctx, inv.Path)}
}

// inventoryProvenance is the inventory file's provenance for reports and
// plans; a Git that does not answer is a warning, and the output goes on
// without the commit.
func (a *app) inventoryProvenance(ctx context.Context, path string) provenance.Info {
	pv, err := provenance.Of(ctx, path)
	if err != nil {
		a.log.Warn("the output names no inventory commit", "error", err)
	}
	return pv
}

// progress returns a progress printer for stderr, or nil when stderr is not
// a terminal: progress is for people, never for pipes or JSON.
func (a *app) progress(total int) func(string, []drift.Result) {
	f, ok := termsafe.FileOf(a.streams.Err)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return (&progressLine{w: f, total: total, every: 2 * time.Second, now: time.Now}).done
}

// progressLine prints a line per machine that is not in sync as it
// finishes, and for the rest at most a count every so often and at the
// end: a clean pass over a thousand machines is a few lines, not a
// thousand (issue 17).
type progressLine struct {
	w        io.Writer
	total    int
	every    time.Duration
	now      func() time.Time
	finished int
	counts   map[drift.Status]int
	last     time.Time
}

func (p *progressLine) done(machine string, results []drift.Result) {
	if p.counts == nil {
		p.counts = map[drift.Status]int{}
		p.last = p.now()
	}
	p.finished++
	worst := drift.Worst(results)
	p.counts[worst]++
	switch {
	case worst != drift.StatusInSync:
		fmt.Fprintf(p.w, "[%d/%d] %-20s %s\n", p.finished, p.total, machine, worst)
	case p.finished == p.total || p.now().Sub(p.last) >= p.every:
		fmt.Fprintf(p.w, "[%d/%d] %d in sync, %d drifted, %d unknown\n", p.finished, p.total,
			p.counts[drift.StatusInSync], p.counts[drift.StatusDrifted], p.counts[drift.StatusUnknown])
	default:
		return
	}
	p.last = p.now()
}

// kubeconfigFor is the kubeconfig a run uses: --kubeconfig (or KUBECONFIG,
// or the settings file), else the one devata bootstrap wrote next to the
// inventory, when it is there; "" for none.
func (a *app) kubeconfigFor(inv *inventory.Inventory) string {
	if a.settings.Kubeconfig != "" {
		return a.settings.Kubeconfig
	}
	written := filepath.Join(filepath.Dir(inv.Path), "kubeconfig")
	if st, err := os.Stat(written); err == nil && st.Mode().IsRegular() {
		a.log.Info("using the kubeconfig devata bootstrap wrote next to the inventory", "path", written)
		return written
	}
	return ""
}

// sessionKubeClients are the Kubernetes clients of a run: from the
// kubeconfig it is given or bootstrap wrote (kubeconfigFor), else, in a pod
// (the CronJob in deploy/), the pod's own service account; none otherwise,
// and the Kubernetes-side checks say so.
func (a *app) sessionKubeClients(inv *inventory.Inventory) (kubernetes.Interface, netcheck.Execer, error) {
	if kubeconfig := a.kubeconfigFor(inv); kubeconfig != "" {
		return kubeClients(kubeconfig)
	}
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, nil, nil //nolint:nilerr // not in a pod: no Kubernetes client
	}
	a.log.Info("using the pod's service account for the Kubernetes API", "host", cfg.Host)
	return kubeClientsFor(cfg)
}
