// Package bootstrap owns the first build of a cluster from maintenance-mode
// machines: Run takes an ordered list of named, idempotent steps that each say
// what they did, and Plan (a plan.Plan, written by plan.Write) says what they and devata
// apply would do now. Decisions come from what the machines report and the
// bundle and kubeconfig on disk, never from a record of an earlier run, so
// running it again resumes an interrupted run. Rolling changes out once the
// cluster exists (reconcile), judging etcd health (gate) and the closing drift
// report (devata bootstrap, with drift) are not here.
package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/inventory"
	"devata.dev/devata/plan"
	"devata.dev/devata/render"
	"devata.dev/devata/snapshot"
	"devata.dev/devata/talosapi"
)

// Options configure one bootstrap run or plan.
type Options struct {
	InventoryPath string
	// AgeIdentities open an encrypted secrets bundle; nil reads them from
	// the process environment as sops does (bootstrap.AgeIdentitiesFromEnv).
	AgeIdentities *render.AgeIdentities
	// Talosconfig is the client config to use; nil derives an os:admin one
	// from the secrets bundle (what devata gen config writes).
	Talosconfig *clientconfig.Config
	// Overrides maps machine names to the host:port to dial instead of their address.
	Overrides map[string]string
	// Dial chooses the talosconfig context and endpoints (talosctl --context, -e).
	Dial []talosapi.DialOption
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
	// Recover, when set, rebuilds etcd from this verified snapshot instead
	// of bootstrapping an empty one: it is uploaded to the first control
	// plane (EtcdRecover) and Bootstrap asked with recover_etcd. Refused
	// while etcd still runs the cluster the snapshot was taken of.
	Recover *snapshot.File
	// RecoverFrom is the snapshot as the user named it, which messages and
	// the runbook name; "" is Recover.Path. It differs when what is read
	// is a copy: the clear text of an encrypted snapshot (RecoverEncrypted),
	// decrypted into a private directory that lives as long as the run.
	RecoverFrom      string
	RecoverEncrypted bool
	// RecoverTalos is the Talos version the snapshot's sidecar recorded
	// (backup etcd), "" when none: the release a machine in maintenance
	// mode is configured for when it could not say its own and no other
	// machine did (bootRelease).
	RecoverTalos string
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
	// desiredFor is a machine's desired config for the Talos it runs: an
	// older release's contract while it runs one (bootstrap Desired.For).
	desiredFor talosapi.DesiredFunc
	dialer     *talosapi.Dialer
	st         *fleetState

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
func (s *Sequence) Dialer() *talosapi.Dialer { return s.dialer }

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
		// a missing bundle is made here but written only once observe
		// found every machine in maintenance mode (writeMissingSecrets)
		{"secrets bundle", func(context.Context) (string, error) { return s.secrets(false) }},
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
		plan.Say(s.say, "", "%s", st.name)
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
