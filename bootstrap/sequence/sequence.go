// Package sequence owns the first build of a cluster from maintenance-mode
// machines: an ordered list of named, idempotent steps that each say what they
// did, and the plan (`devata plan`) that says what they would do now. Every
// decision comes from what the machines report, never from a local state
// file, so an interrupted run is resumed by running it again. It does not roll
// changes out to a running cluster (reconcile does) or render reports (drift does).
package sequence

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"google.golang.org/grpc/codes"
	"k8s.io/client-go/tools/clientcmd"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/gate"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// Options configure one bootstrap run or plan.
type Options struct {
	InventoryPath string
	// Talosconfig is the client config to use; nil derives an os:admin one
	// from the secrets bundle (what devata gen config writes).
	Talosconfig *clientconfig.Config
	// Overrides maps machine names to the host:port to dial instead of their address.
	Overrides map[string]string
	// KubeconfigOut is where the admin kubeconfig is written; default
	// "kubeconfig" next to the inventory.
	KubeconfigOut string
	// Kubeconfig is used to watch the Nodes; default KubeconfigOut.
	Kubeconfig string
	// Force replaces a kubeconfig that belongs to another cluster.
	Force bool
	// Yes confirms rebooting applies to running machines without asking.
	Yes bool
	// Confirm is asked before a rebooting apply to a running machine unless
	// Yes; nil refuses. Its error stops the run before any write.
	Confirm func(rebooting []string) error
	// SkipNodes skips waiting for the Kubernetes Nodes.
	SkipNodes   bool
	Concurrency int
	// Timeout bounds one Talos API call; Wait bounds each wait (a machine's
	// return, etcd health, the Nodes); Poll is how often a wait looks again.
	Timeout, Wait, Poll time.Duration
	// EtcdSettle is how long every control plane's etcd service must be seen
	// waiting in its PreFunc before one is bootstrapped (default 15s): a
	// control plane with etcd data passes through the same state for a
	// moment after each boot, before its etcd starts.
	EtcdSettle time.Duration
	// Out receives one line per step and per thing done; nil discards.
	Out io.Writer
}

// Sequence is one bootstrap run or plan over one inventory.
type Sequence struct {
	opts Options

	inv            *inventory.Inventory
	secretsPath    string
	secretsMissing bool
	bundle         *secrets.Bundle
	desired        map[string][]byte
	dialer         *machines.Dialer
	st             *fleetState

	mu sync.Mutex // serialises Out
}

// New prepares a sequence; nothing is read or sent until Run or Plan.
func New(opts Options) *Sequence {
	if opts.Concurrency < 1 {
		opts.Concurrency = 32
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	if opts.Wait <= 0 {
		opts.Wait = 10 * time.Minute
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.EtcdSettle <= 0 {
		opts.EtcdSettle = 15 * time.Second
	}
	if opts.Out == nil {
		opts.Out = io.Discard
	}
	return &Sequence{opts: opts}
}

// Inventory, Desired and Dialer are available once Run or Plan rendered.
func (s *Sequence) Inventory() *inventory.Inventory { return s.inv }

// Desired returns each machine's rendered config by name.
func (s *Sequence) Desired() map[string][]byte { return s.desired }

// Dialer returns the dialer the run used.
func (s *Sequence) Dialer() *machines.Dialer { return s.dialer }

// KubeconfigPath is where the admin kubeconfig is (or would be) written.
func (s *Sequence) KubeconfigPath() string {
	if s.opts.KubeconfigOut != "" {
		return s.opts.KubeconfigOut
	}
	path := s.opts.InventoryPath
	if s.inv != nil {
		path = s.inv.Path
	}
	return filepath.Join(filepath.Dir(path), "kubeconfig")
}

// CNINone reports an inventory that leaves the CNI to the operator
// (cluster.network.cni: none, the default): Nodes cannot be Ready before it
// is installed.
func (s *Sequence) CNINone() bool { return s.inv.Cluster.Network.CNI == "none" }

// NodesKubeconfig is the kubeconfig used to watch Nodes.
func (s *Sequence) NodesKubeconfig() string {
	if s.opts.Kubeconfig != "" {
		return s.opts.Kubeconfig
	}
	return s.KubeconfigPath()
}

func (s *Sequence) say(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.opts.Out, format+"\n", args...)
}

// ErrRefused is wrapped by every refusal: devata saw something that makes
// going on unsafe, and changed nothing because of it.
var ErrRefused = errors.New("refused")

type step struct {
	name string
	run  func(context.Context) (string, error)
}

// Run runs the sequence: validate → secrets → render → observe → configure
// the machines in maintenance mode → bootstrap etcd (only if no control plane
// has etcd data) → wait for etcd → kubeconfig → wait for Nodes. Each step
// prints what it did; the first failure stops the run, and running it again
// continues from what the machines report.
func (s *Sequence) Run(ctx context.Context) error {
	steps := []step{
		{"validate inventory", s.validate},
		{"secrets bundle", func(context.Context) (string, error) { return s.secrets(true) }},
		{"render configs", s.render},
		{"observe machines", s.observe},
		{"configure machines", s.configure},
		{"bootstrap etcd", s.bootstrapEtcd},
		{"wait for etcd", s.waitEtcd},
		{"kubeconfig", s.kubeconfig},
		{"wait for Nodes", s.waitNodes},
	}
	for _, st := range steps {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("interrupted before %s: run devata bootstrap again; it continues from what the machines report", st.name)
		}
		s.say("==> %s", st.name)
		start := time.Now()
		msg, err := st.run(ctx)
		if err != nil {
			// The whole error goes to the caller; the step line stays one short line.
			line, _, _ := strings.Cut(err.Error(), "\n")
			if r := []rune(line); len(r) > 120 {
				line = string(r[:119]) + "…"
			}
			s.say("    ✗ %s", line)
			if ctx.Err() != nil {
				return fmt.Errorf("%s: interrupted: %w; run devata bootstrap again: it continues from what the machines report", st.name, err)
			}
			return fmt.Errorf("%s: %w", st.name, err)
		}
		s.say("    ✓ %s (%s)", msg, time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// Plan observes everything and returns what Run (and, for configured machines
// whose config differs once the cluster exists, devata apply) would do now.
// It writes nothing: a missing bundle is replaced by a throwaway one in memory.
func (s *Sequence) Plan(ctx context.Context) (*Plan, error) {
	if _, err := s.validate(ctx); err != nil {
		return nil, err
	}
	if _, err := s.secrets(false); err != nil {
		return nil, err
	}
	if _, err := s.render(ctx); err != nil {
		return nil, err
	}
	s.st = observeFleet(ctx, s.inv, s.dialer, s.desired, s.opts.Concurrency, s.opts.Timeout, true)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	in := planInput{inv: s.inv, secretsPath: s.secretsPath, secretsMissing: s.secretsMissing, st: s.st, skipNodes: s.opts.SkipNodes}
	if v, _ := etcdVerdict(s.inv, s.st); v == etcdOurs {
		in.etcdHealthy = gate.EtcdHealthy(ctx, s.inv, s.dialer, s.opts.Timeout)
	}
	in.kubeconfig = s.kubeconfigState()
	if !s.opts.SkipNodes {
		if kc := s.NodesKubeconfig(); fileExists(kc) {
			if kube, err := machines.KubeClient(kc); err == nil {
				// A plan only glances at Kubernetes: an API server that is not up yet must not hold it.
				nctx, cancel := context.WithTimeout(ctx, min(s.opts.Timeout, 5*time.Second))
				n := machines.ObserveNodes(nctx, kube)
				cancel()
				in.nodes = &n
			}
		}
	}
	p := buildPlan(in)
	if s.secretsMissing {
		p.Notes = append(p.Notes, "no secrets bundle yet: configs were rendered with a throwaway bundle to check them; bootstrap creates the real one")
	}
	if s.opts.Talosconfig == nil {
		p.Notes = append(p.Notes, "no talosconfig given: an os:admin one derived from the secrets bundle was used")
	}
	return p, nil
}

func (s *Sequence) validate(context.Context) (string, error) {
	inv, err := inventory.Load(s.opts.InventoryPath)
	if err != nil {
		return "", fmt.Errorf("%w\n%s is invalid: nothing was sent to any machine; run devata validate", err, s.opts.InventoryPath)
	}
	s.inv = inv
	for _, w := range inv.Warnings {
		s.say("    warning: %s", w)
	}
	cps := len(inv.ControlPlanes())
	return fmt.Sprintf("%s: %d machines (%d control planes, %d workers)", filepath.Base(inv.Path), len(inv.Machines), cps, len(inv.Machines)-cps), nil
}

// secrets loads the bundle, or creates it (write) only when it is missing.
func (s *Sequence) secrets(write bool) (string, error) {
	s.secretsPath = inventory.ResolvePath(filepath.Dir(s.inv.Path), s.inv.Cluster.Secrets)
	b, err := bootstrap.LoadSecrets(s.secretsPath)
	if err == nil {
		s.bundle = b
		return "loaded " + rel(s.inv, s.secretsPath) + " (kept as it is)", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err // damaged or unreadable: never replaced
	}
	s.secretsMissing = true
	if b, err = bootstrap.NewSecrets(s.inv.Cluster.TalosVersion); err != nil {
		return "", err
	}
	s.bundle = b
	if !write {
		return "missing: a throwaway bundle in memory", nil
	}
	if err := bootstrap.WriteSecrets(s.secretsPath, b, false); err != nil {
		return "", err
	}
	s.secretsMissing = false
	return "created " + rel(s.inv, s.secretsPath) + " (mode 0600): back it up now, it is the only key to this cluster", nil
}

func (s *Sequence) render(context.Context) (string, error) {
	rendered, err := bootstrap.RenderValidated(s.inv, s.bundle)
	if err != nil {
		return "", fmt.Errorf("rendering failed, nothing was sent to any machine: %w", err)
	}
	s.desired = map[string][]byte{}
	for _, r := range rendered {
		s.desired[r.Machine] = r.Config
	}
	tc := s.opts.Talosconfig
	note := ""
	if tc == nil {
		r, err := bootstrap.NewRenderer(s.inv, s.bundle)
		if err != nil {
			return "", err
		}
		data, err := r.Talosconfig()
		if err != nil {
			return "", err
		}
		if tc, err = clientconfig.FromBytes(data); err != nil {
			return "", err
		}
		note = "; talosconfig derived from the bundle (os:admin)"
	} else if !sameCA(tc, s.bundle) {
		s.say("    warning: the talosconfig's CA is not the secrets bundle's OS CA: machines configured from this bundle will not accept it")
	}
	if s.dialer, err = machines.NewDialer(tc, s.opts.Overrides); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d configs rendered and validated%s", len(rendered), note), nil
}

func sameCA(tc *clientconfig.Config, b *secrets.Bundle) bool {
	ctx := tc.Contexts[tc.Context]
	if ctx == nil || b.Certs == nil || b.Certs.OS == nil {
		return false
	}
	ca, err := base64.StdEncoding.DecodeString(ctx.CA)
	if err != nil {
		return false
	}
	return certsEqual(ca, b.Certs.OS.Crt)
}

func certsEqual(a, b []byte) bool {
	ca, cb := firstCert(a), firstCert(b)
	return ca != nil && cb != nil && ca.Equal(cb)
}

func firstCert(pemData []byte) *x509.Certificate {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return nil
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return c
}

// observe looks at every machine until each gives a clear answer (it may be
// rebooting from an interrupted run), then refuses if etcd data exists that
// this sequence did not make.
func (s *Sequence) observe(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.opts.Wait)
	last := ""
	for {
		s.st = observeFleet(ctx, s.inv, s.dialer, s.desired, s.opts.Concurrency, s.opts.Timeout, true)
		unclear, permanent := s.st.inconclusive(s.inv)
		if len(unclear) == 0 {
			break
		}
		if permanent {
			return "", fmt.Errorf("nothing was changed: %s (bootstrap needs an os:admin talosconfig)", strings.Join(unclear, "; "))
		}
		if msg := strings.Join(unclear, "; "); msg != last {
			s.say("    waiting for a clear answer from: %s", msg)
			last = msg
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no clear answer within %s, so nothing was changed: %s", s.opts.Wait, strings.Join(unclear, "; "))
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
	if v, why := etcdVerdict(s.inv, s.st); v == etcdForeign || v == etcdUnclear {
		return "", fmt.Errorf("%w: %s", ErrRefused, why)
	}
	var maint, done, differ []string
	for i := range s.inv.Machines {
		name := s.inv.Machines[i].Name
		switch {
		case s.st.maintenance(name):
			maint = append(maint, name)
		case s.st.differs(name):
			differ = append(differ, name)
		default:
			done = append(done, name)
		}
	}
	var parts []string
	if len(maint) > 0 {
		parts = append(parts, "maintenance mode: "+strings.Join(maint, ", "))
	}
	if len(differ) > 0 {
		parts = append(parts, "config differs: "+strings.Join(differ, ", "))
	}
	if len(done) > 0 {
		parts = append(parts, "runs the desired config: "+strings.Join(done, ", "))
	}
	return strings.Join(parts, "; "), nil
}

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
	err := machines.ForEach(ctx, all, s.opts.Concurrency, s.opts.Wait+4*s.opts.Timeout, func(ctx context.Context, m *inventory.Machine) error {
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

var errBackInMaintenance = errors.New("back in maintenance mode")

// applyMaintenance sends a machine its config over the insecure maintenance
// connection, then waits until it answers on mTLS with that config. It
// refuses when the machine answers on mTLS: a configured machine is never
// sent an insecure apply.
func (s *Sequence) applyMaintenance(ctx context.Context, m *inventory.Machine) error {
	for attempt := 1; ; attempt++ {
		err := ApplyMaintenance(ctx, s.dialer, m, s.desired[m.Name], s.opts.Timeout)
		switch {
		case err == nil:
			s.say("    %s: config applied over the maintenance connection (mode auto); waiting for it to answer on mTLS", m.Name)
		case errors.Is(err, ErrRefused) || !machines.IsUnreachable(err) || ctx.Err() != nil:
			return err
		default:
			// The connection dropped mid-apply: the machine may have rebooted into its config, or not.
			s.say("    %s: connection lost during the apply (%v); waiting to see whether it rebooted into its config", m.Name, err)
		}
		werr := s.waitConfigured(ctx, m, err != nil)
		if errors.Is(werr, errBackInMaintenance) && attempt < 3 {
			s.say("    %s: still in maintenance mode after the interrupted apply: applying again", m.Name)
			continue
		}
		return werr
	}
}

// ApplyMaintenance applies config to a machine in maintenance mode (mode
// auto, insecure). It first asks over mTLS and refuses, naming the machine
// and what it answered, when the machine is configured.
func ApplyMaintenance(ctx context.Context, d *machines.Dialer, m *inventory.Machine, config []byte, timeout time.Duration) error {
	if answer := answersMTLS(ctx, d, m, timeout); answer != "" {
		return fmt.Errorf("%w: %s answers on mTLS (%s): it is configured, so no insecure maintenance apply is sent to it; use devata apply for configured machines", ErrRefused, m.Name, answer)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.MaintenanceClient(actx, m)
	if err != nil {
		return fmt.Errorf("dial %s: %w", d.Endpoint(m), err)
	}
	defer c.Close()
	if _, err := machines.Apply(actx, c, config, machines.ModeAuto, 0); err != nil {
		return fmt.Errorf("maintenance apply: %w", err)
	}
	return nil
}

// answersMTLS returns what the machine said over mTLS, or "" when it did not
// answer there.
func answersMTLS(ctx context.Context, d *machines.Dialer, m *inventory.Machine, timeout time.Duration) string {
	vctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.Client(vctx, m)
	if err != nil {
		return ""
	}
	defer c.Close()
	resp, err := c.Version(vctx)
	if err != nil {
		return ""
	}
	tag := "?"
	if msgs := resp.GetMessages(); len(msgs) > 0 {
		tag = msgs[0].GetVersion().GetTag()
	}
	return "Version answered: Talos " + tag
}

// applyRunning applies the desired config to a configured machine before the
// cluster exists, in the mode its dry run resolved, and waits for it.
func (s *Sequence) applyRunning(ctx context.Context, m *inventory.Machine, mode machines.Mode) error {
	actx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	c, err := s.dialer.Client(actx, m)
	if err == nil {
		_, err = machines.Apply(actx, c, s.desired[m.Name], mode, 0)
		c.Close()
	}
	cancel()
	if err != nil && !machines.IsUnreachable(err) {
		return fmt.Errorf("apply: %w", err)
	}
	s.say("    %s: desired config applied (%s); waiting for it to run it", m.Name, mode)
	return s.waitConfigured(ctx, m, false)
}

// waitConfigured polls until the machine answers on mTLS and runs the
// desired config, at stage booting or running: a control plane stays
// booting until etcd runs (machined's boot sequence waits for every service,
// v1alpha1_sequencer_tasks.go StartAllServices), which needs the bootstrap
// that comes after this. With reapply, seeing it back in maintenance mode
// returns errBackInMaintenance.
func (s *Sequence) waitConfigured(ctx context.Context, m *inventory.Machine, reapply bool) error {
	start := time.Now()
	deadline := start.Add(s.opts.Wait)
	last := "no answer yet"
	for {
		octx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		o := machines.Observe(octx, s.dialer, m)
		cancel()
		switch {
		case o.Maintenance && reapply:
			return errBackInMaintenance
		case o.Err != nil:
			last = o.Err.Error()
		case o.ConfigErr != nil:
			last = o.ConfigErr.Error()
		default:
			d, err := machines.DiffConfigs(o.Active, s.desired[m.Name])
			switch {
			case err != nil:
				last = err.Error()
			case !d.Equal:
				last = "applied config differs: " + d.Summary()
			case o.Stage != "running" && o.Stage != "booting":
				last = "stage " + o.Stage
			default:
				s.say("    %s: answers on mTLS and runs its desired config, stage %s (%s)", m.Name, o.Stage, time.Since(start).Round(time.Millisecond))
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("did not come back on mTLS with its config within %s: %s", s.opts.Wait, last)
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return fmt.Errorf("waiting for it: %w (last: %s)", err, last)
		}
	}
}

// bootstrapEtcd checks etcd on every control plane and bootstraps the first by
// name only when none has any data: every control plane's etcd service has
// been seen waiting in its PreFunc for EtcdSettle, on devata's own clock.
// AlreadyExists counts as done.
func (s *Sequence) bootstrapEtcd(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.opts.Wait)
	waitingSince := map[string]time.Time{}
	said := ""
	for {
		s.st = observeFleet(ctx, s.inv, s.dialer, s.desired, s.opts.Concurrency, s.opts.Timeout, false)
		v, why := etcdVerdict(s.inv, s.st)
		var notReady, unsettled []string
		now := time.Now()
		for _, m := range s.inv.ControlPlanes() {
			if !s.st.configured(m.Name) {
				notReady = append(notReady, m.Name)
			}
			if f := s.st.etcd[m.Name]; !f.None || s.st.maintenance(m.Name) {
				delete(waitingSince, m.Name)
				continue
			}
			if _, ok := waitingSince[m.Name]; !ok {
				waitingSince[m.Name] = now
			}
			if now.Sub(waitingSince[m.Name]) < s.opts.EtcdSettle {
				unsettled = append(unsettled, m.Name)
			}
		}
		switch {
		case v == etcdForeign:
			return "", fmt.Errorf("%w: %s", ErrRefused, why)
		case v == etcdOurs:
			return why + ": nothing to bootstrap", nil
		case v == etcdNone && len(notReady) == 0 && len(unsettled) > 0:
			if msg := strings.Join(unsettled, ", "); msg != said {
				s.say("    etcd waits to be bootstrapped on every control plane; watching it hold for %s before bootstrapping (%s)", s.opts.EtcdSettle, msg)
				said = msg
			}
		case v == etcdNone && len(notReady) == 0:
			msg, err := s.bootstrapFirst(ctx, why)
			if client.StatusCode(err) != codes.FailedPrecondition || time.Now().After(deadline) {
				return msg, err
			}
			// Talos takes a bootstrap only once etcd waits for one; look again, then retry.
			s.say("    %v: not ready for it yet, trying again", err)
		}
		if time.Now().After(deadline) {
			if v == etcdUnclear {
				return "", fmt.Errorf("%w: %s", ErrRefused, why)
			}
			return "", fmt.Errorf("control planes not configured and up within %s: %s", s.opts.Wait, strings.Join(append(notReady, unsettled...), ", "))
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
}

func (s *Sequence) bootstrapFirst(ctx context.Context, why string) (string, error) {
	m := bootstrapNode(s.inv)
	for _, cp := range s.inv.ControlPlanes() {
		s.say("    %s: %s", cp.Name, s.st.etcd[cp.Name].Seen)
	}
	s.say("    %s: bootstrapping %s, the first control plane by name", why, m.Name)
	bctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	c, err := s.dialer.Client(bctx, m)
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", m.Name, err)
	}
	defer c.Close()
	err = c.Bootstrap(bctx, &machine.BootstrapRequest{})
	switch client.StatusCode(err) {
	case codes.OK:
		return "bootstrapped etcd on " + m.Name, nil
	case codes.AlreadyExists:
		return m.Name + " already holds etcd data (AlreadyExists): treated as bootstrapped", nil
	}
	return "", fmt.Errorf("bootstrap %s: %w", m.Name, err)
}

// waitEtcd waits until every control plane agrees etcd is healthy with
// exactly the configured control planes as members.
func (s *Sequence) waitEtcd(ctx context.Context) (string, error) {
	deadline := time.Now().Add(s.opts.Wait)
	last := ""
	for {
		err := gate.EtcdHealthy(ctx, s.inv, s.dialer, s.opts.Timeout)
		if err == nil {
			return "etcd healthy, members [" + strings.Join(sortedCPNames(s.inv), " ") + "]", nil
		}
		if err.Error() != last {
			s.say("    waiting: %v", err)
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("etcd not healthy within %s: %w", s.opts.Wait, err)
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
		}
	}
}

// kubeconfigState reads the kubeconfig at the output path: the same cluster
// means the same API server and the bundle's Kubernetes CA.
func (s *Sequence) kubeconfigState() kubeconfigState {
	ks := kubeconfigState{Path: s.KubeconfigPath()}
	data, err := os.ReadFile(ks.Path)
	if err != nil {
		return ks
	}
	ks.Exists = true
	cfg, err := clientcmd.Load(data)
	if err != nil {
		ks.Why = "not a kubeconfig: " + err.Error()
		return ks
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil {
		ks.Why = "no current context"
		return ks
	}
	cl := cfg.Clusters[ctx.Cluster]
	switch {
	case cl.Server != s.inv.Cluster.Endpoint:
		ks.Why = fmt.Sprintf("server %s, cluster.endpoint %s", cl.Server, s.inv.Cluster.Endpoint)
	case s.bundle == nil || s.bundle.Certs == nil || s.bundle.Certs.K8s == nil || !containsCert(cl.CertificateAuthorityData, s.bundle.Certs.K8s.Crt):
		ks.Why = "its certificate authority is not the bundle's Kubernetes CA"
	default:
		ks.Ours = true
		ks.Why = "server " + cl.Server + " and the bundle's Kubernetes CA"
	}
	return ks
}

func containsCert(bundle, crt []byte) bool {
	want := firstCert(crt)
	if want == nil {
		return false
	}
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && c.Equal(want) {
			return true
		}
	}
}

// kubeconfig keeps a kubeconfig for this cluster, refuses to replace one for
// another cluster without Force, and otherwise fetches it from the bootstrap
// node and writes it 0600.
func (s *Sequence) kubeconfig(ctx context.Context) (string, error) {
	ks := s.kubeconfigState()
	switch {
	case ks.Exists && ks.Ours:
		return rel(s.inv, ks.Path) + " exists for this cluster (" + ks.Why + "): kept", nil
	case ks.Exists && !s.opts.Force:
		return "", fmt.Errorf("%w: %s exists and is not this cluster's kubeconfig (%s): pass --force to replace it, or --kubeconfig-out to write elsewhere", ErrRefused, ks.Path, ks.Why)
	}
	m := bootstrapNode(s.inv)
	kctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	c, err := s.dialer.Client(kctx, m)
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", m.Name, err)
	}
	defer c.Close()
	data, err := c.Kubeconfig(kctx)
	if err != nil {
		return "", fmt.Errorf("kubeconfig from %s: %w", m.Name, err)
	}
	if err := bootstrap.WriteSecretFile(ks.Path, data, ks.Exists); err != nil {
		return "", err
	}
	return fmt.Sprintf("fetched from %s, written to %s (mode 0600)", m.Name, ks.Path), nil
}

// waitNodes waits until every machine's Node is registered and Ready. With
// cluster.network.cni none no Node can be Ready before the operator installs
// Cilium, which needs the API server this step waits for: then every Node
// registered and NotReady only for want of a CNI is enough.
func (s *Sequence) waitNodes(ctx context.Context) (string, error) {
	if s.opts.SkipNodes {
		return "skipped (--skip-nodes)", nil
	}
	path := s.NodesKubeconfig()
	kube, err := machines.KubeClient(path)
	if err != nil {
		return "", err
	}
	deadline := time.Now().Add(s.opts.Wait)
	last := ""
	for {
		nctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		nodes := machines.ObserveNodes(nctx, kube)
		cancel()
		var waiting []string
		noCNI := 0
		if nodes.Err != nil {
			waiting = append(waiting, nodes.Err.Error())
		} else {
			for i := range s.inv.Machines {
				name := s.inv.Machines[i].Name
				n, ok := nodes.ByName[name]
				switch {
				case !ok:
					waiting = append(waiting, name+" not registered")
				case !n.Ready && s.CNINone() && machines.NetworkNotReady(n.ReadyReason):
					noCNI++
				case !n.Ready:
					waiting = append(waiting, name+" not Ready ("+n.ReadyReason+")")
				}
			}
		}
		if len(waiting) == 0 && noCNI > 0 {
			return fmt.Sprintf("%d Nodes registered; %d NotReady until a CNI runs (cluster.network.cni: none): install Cilium next", len(s.inv.Machines), noCNI), nil
		}
		if len(waiting) == 0 {
			return fmt.Sprintf("%d Nodes registered and Ready", len(s.inv.Machines)), nil
		}
		if msg := strings.Join(waiting, "; "); msg != last {
			s.say("    waiting (kubeconfig %s): %s", path, msg)
			last = msg
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("nodes not Ready within %s: %s (pass --skip-nodes when no Kubernetes API is reachable from here)", s.opts.Wait, strings.Join(waiting, "; "))
		}
		if err := sleep(ctx, s.opts.Poll); err != nil {
			return "", err
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

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func names(ms []*inventory.Machine) string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Name)
	}
	return strings.Join(out, ", ")
}
