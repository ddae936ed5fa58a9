// Package target is what every check receives: one machine of one drift
// pass, with its desired state, its Talos connection and what was observed
// over it, and the cluster's Kubernetes client and what was observed there.
// It reads nothing itself; the families' own reads hang on it (Once, Shared)
// so that each is made once per machine, or once per pass.
package target

import (
	"context"
	"sync"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Target is one machine of a pass, as every family's checks read it.
type Target struct {
	Machine *inventory.Machine
	// Inventory is the machine's (nil in checks that need only Machine).
	Inventory *inventory.Inventory
	// Desired is the rendered machine config.
	Desired           []byte
	TalosVersion      string
	KubernetesVersion string
	// ControlPlanes are the names of the inventory's control planes: the
	// etcd members there should be.
	ControlPlanes []string

	// Client is the machine's Talos connection; nil when it could not be
	// dialled (Obs.Err says why).
	Client *client.Client
	// Obs is what the pass read over Client (its Active holds the active
	// config every family compares with).
	Obs *talosapi.Observation

	// Kube is the cluster's Kubernetes API; nil when there is no
	// kubeconfig. Nodes is what the pass read of its Nodes; nil means
	// Kubernetes was not consulted.
	Kube  kubernetes.Interface
	Nodes *talosapi.Nodes

	// Talosctl is how next steps reach the machine with talosctl, as
	// devata did (Dialer.Talosctl); Node is the -n it names. Empty means
	// "talosctl -n ADDRESS".
	Talosctl, Node string

	// Selected says whether the pass runs the named check on this machine;
	// nil means every check (a family that reads for two checks asks it).
	Selected func(name string) bool

	pass *Pass

	mu   sync.Mutex
	once map[any]any
}

// Pass is what the machines of one pass share: the reads made once for all
// of them (Shared). A nil Pass shares nothing.
type Pass struct {
	mu     sync.Mutex
	shared map[any]*entry
}

type entry struct {
	mu   sync.Mutex
	v    any
	kept bool
}

// NewPass is an empty pass.
func NewPass() *Pass { return &Pass{shared: map[any]*entry{}} }

// In puts t in pass p, whose Shared reads it then takes part in.
func (t *Target) In(p *Pass) *Target {
	t.pass = p
	return t
}

// Runs says whether the pass runs the check name on this machine.
func (t *Target) Runs(name string) bool { return t.Selected == nil || t.Selected(name) }

// TalosctlFor is a talosctl command line for the machine.
func (t *Target) TalosctlFor(args string) string {
	if t.Talosctl == "" {
		return "talosctl -n " + t.Machine.Address + " " + args
	}
	return t.Talosctl + " " + args
}

// NodeName is the machine as talosctl -n names it.
func (t *Target) NodeName() string {
	if t.Node == "" {
		return t.Machine.Address
	}
	return t.Node
}

// Once returns what read gives, read once per machine under key (a
// family's unexported key type): the second check of a family that asks
// gets the first one's value.
// A read may itself ask Once for another key; a machine's checks run one
// at a time, so two reads of one key do not race.
func Once[V any](t *Target, key any, read func() V) V {
	t.mu.Lock()
	v, ok := t.once[key]
	t.mu.Unlock()
	if ok {
		return v.(V)
	}
	r := read()
	Set(t, key, r)
	return r
}

// Set gives key the value v on this machine, as if Once had read it (a
// test's observation).
func Set[V any](t *Target, key any, v V) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.once == nil {
		t.once = map[any]any{}
	}
	t.once[key] = v
}

// Shared returns what read gives, read once per pass under key and shared
// by every machine of the pass: machines wait for the first read rather
// than each starting their own. A read that says not to keep it (cut short
// by its machine's context) is read again by the next machine. Outside a
// pass it reads every time.
func Shared[V any](ctx context.Context, t *Target, key any, read func(context.Context) (v V, keep bool)) V {
	if t.pass == nil {
		v, _ := read(ctx)
		return v
	}
	p := t.pass
	p.mu.Lock()
	e, ok := p.shared[key]
	if !ok {
		e = &entry{}
		p.shared[key] = e
	}
	p.mu.Unlock()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.kept {
		return e.v.(V)
	}
	v, keep := read(ctx)
	if keep {
		e.v, e.kept = v, true
	}
	return v
}
