package gate

import (
	"fmt"
	"slices"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"

	"devata.dev/devata/talosapi"
)

// KubernetesPath decides whether the cluster's Kubernetes components may
// move from the lowest version any of them runs (from) to the inventory's
// cluster.kubernetesVersion (to). It is talosctl upgrade-k8s' rule
// (pkg/cluster/kubernetes/talos_managed.go Upgrade over DetectLowestVersion,
// go-kubernetes upgrade.Path.IsSupported): within one minor release, or to
// the next one. Kubernetes' version skew policy is the reason: every
// component may be at most one minor release ahead of the oldest, and
// kube-apiserver never behind another component.
func KubernetesPath(from, to string) error {
	f, err := semver.ParseTolerant(from)
	if err != nil {
		return fmt.Errorf("a component runs Kubernetes %q, not a version devata can compare: upgrade it by hand (talosctl upgrade-k8s)", from)
	}
	t, err := semver.ParseTolerant(to)
	if err != nil {
		return fmt.Errorf("cluster.kubernetesVersion %q is not a version: fix the inventory", to)
	}
	switch {
	case t.Major == f.Major && t.Minor == f.Minor:
		return nil
	case t.Major == f.Major && t.Minor == f.Minor+1:
		return nil
	case t.Major < f.Major || (t.Major == f.Major && t.Minor < f.Minor):
		return fmt.Errorf("a downgrade from %s to %s: Kubernetes does not go back a minor release (etcd holds objects in the newer API versions); set cluster.kubernetesVersion to a %d.%d release", from, to, f.Major, f.Minor)
	}
	return fmt.Errorf("a jump from %s to %s: Kubernetes moves one minor release at a time (its version skew policy); set cluster.kubernetesVersion to the latest v%d.%d patch, run, then go on to %s", from, to, f.Major, f.Minor+1, to)
}

// KubernetesOnTalos refuses a Kubernetes version the machine's running Talos
// does not support: Talos refuses such a config (machinery
// compatibility.KubernetesVersion.SupportedWith, what talosctl upgrade-k8s
// checks on every node first: pkg/cluster/kubernetes/compat.go
// VerifyVersionCompatibility).
func KubernetesOnTalos(kube, talos string) error {
	tv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: talos})
	if err != nil {
		return fmt.Errorf("the machine reports Talos %q, not a version devata can compare: check it with talosctl version", talos)
	}
	kv, err := compatibility.ParseKubernetesVersion(strings.TrimPrefix(kube, "v"))
	if err != nil {
		return fmt.Errorf("cluster.kubernetesVersion %q is not a version: fix the inventory", kube)
	}
	if err := kv.SupportedWith(tv); err != nil {
		return fmt.Errorf("Talos %s does not run Kubernetes %s (%v): upgrade Talos first (devata upgrade), or pick a Kubernetes version it supports", talos, kube, err)
	}
	return nil
}

// KubeMachine is one machine's part in a Kubernetes version change, as a
// planner saw it.
type KubeMachine struct {
	Name         string
	ControlPlane bool
	// Maintenance: not configured yet; it runs no Kubernetes component and
	// gets the desired versions when it is configured.
	Maintenance bool
	// Running are the images its applied config runs; nil when that config
	// could not be read.
	Running *talosapi.KubeComponents
	// NodeKubelet is the kubelet version its Node reports ("" not read);
	// it counts toward the lowest version when Running is nil.
	NodeKubelet string
	// Talos is the Talos version it reports ("" not read).
	Talos string
	// Changes: the plan changes its config now, to one that runs Desired.
	// Why says why not, when it does not.
	Changes bool
	Desired talosapi.KubeComponents
	Why     string
}

// Moves are the components whose version the change moves on the machine.
func (k KubeMachine) Moves() []string {
	if !k.Changes || k.Running == nil {
		return nil
	}
	var out []string
	for _, c := range talosapi.KubeOrder {
		if want := k.Desired.Image(c); want != "" && talosapi.ImageTag(k.Running.Image(c)) != talosapi.ImageTag(want) {
			out = append(out, c)
		}
	}
	return out
}

// KubeRollout is a Kubernetes version change over the cluster, component
// by component in talosctl upgrade-k8s' order
// (pkg/cluster/kubernetes/talos_managed.go Upgrade: kube-apiserver on every
// control plane, then kube-controller-manager, kube-scheduler, then the
// kubelets, control planes first).
type KubeRollout struct {
	// From is the lowest version any component runs; To is cluster.kubernetesVersion.
	From, To string
	// Moves lists, by component, the machines that move it now, in order.
	Moves map[string][]string
	// Held says, by component, why it waits: its machines keep the
	// version they run this time.
	Held map[string]string
	// Refused says why nothing of it goes ahead.
	Refused string
	// DeprecatedUnchecked: the deprecated-API check was not made (forced).
	DeprecatedUnchecked bool
	// Manifests says what syncing the bootstrap manifests after the last
	// step would change as they stand (a dry run; reconcile fills it).
	Manifests []string
}

// Moving reports whether the machine moves the component now.
func (k *KubeRollout) Moving(machine, component string) bool {
	return k != nil && slices.Contains(k.Moves[component], machine)
}

// Next says which step comes first.
func (k *KubeRollout) Next() string {
	if k.Refused != "" {
		return "none: refused"
	}
	for _, c := range talosapi.KubeOrder {
		if ms := k.Moves[c]; len(ms) > 0 {
			return c + " on " + ms[0]
		}
	}
	return "none"
}

// PlanKubernetes decides which components move now when the machines'
// configs change Kubernetes versions to to; nil when none does. noNodes,
// when set, says why Nodes cannot be read: a kubelet's move is confirmed
// on its Node, so without them the kubelets wait.
//
// The rules are talosctl upgrade-k8s' and Kubernetes' version skew
// policy's: one minor release at most from the lowest version any
// component runs (KubernetesPath); a version every moving machine's Talos
// supports (KubernetesOnTalos); every kube-apiserver on the new version
// before any other component moves, so that no kubelet is ever newer than
// an API server it may reach (workers reach every one through KubePrism)
// and no controller-manager or scheduler newer than one. A control plane
// that is not moving its kube-apiserver now and does not already run the
// new version (unreachable, skipped) holds everything after the API servers.
func PlanKubernetes(to string, ms []KubeMachine, noNodes string) *KubeRollout {
	var versions []string
	moving := map[string][]string{}
	for _, m := range ms {
		if m.Running != nil {
			versions = append(versions, m.Running.Versions()...)
		} else if m.NodeKubelet != "" {
			versions = append(versions, m.NodeKubelet)
		}
		if mv := m.Moves(); len(mv) > 0 {
			moving[m.Name] = mv
		}
	}
	if len(moving) == 0 {
		return nil
	}
	low, high := bounds(versions)
	k := &KubeRollout{From: low, To: to, Moves: map[string][]string{}, Held: map[string]string{}}
	// from the lowest version, and never a minor release back from the highest
	for _, from := range []string{low, high} {
		if err := KubernetesPath(from, to); err != nil {
			k.Refused = err.Error()
			return k
		}
	}
	for _, m := range ms {
		if _, ok := moving[m.Name]; ok && m.Talos != "" {
			if err := KubernetesOnTalos(to, m.Talos); err != nil {
				k.Refused = m.Name + ": " + err.Error()
				return k
			}
		}
	}

	behind := apiServersBehind(to, ms, moving)
	if len(behind) > 0 {
		why := "every kube-apiserver must run " + to + " before another component moves, and these do not yet: " + strings.Join(behind, ", ") + "; the rest moves on a later run, once they do"
		for _, c := range talosapi.KubeOrder[1:] {
			k.Held[c] = why
		}
	} else if noNodes != "" {
		k.Held[talosapi.Kubelet] = "a kubelet's new version is confirmed on its Node, and " + noNodes
	}
	// control planes first, then workers, each in the order given
	for _, cp := range []bool{true, false} {
		for _, m := range ms {
			if m.ControlPlane != cp {
				continue
			}
			for _, c := range moving[m.Name] {
				if k.Held[c] == "" {
					k.Moves[c] = append(k.Moves[c], m.Name)
				}
			}
		}
	}
	for c := range k.Held {
		if !slices.ContainsFunc(ms, func(m KubeMachine) bool { return slices.Contains(moving[m.Name], c) }) {
			delete(k.Held, c) // nothing of it was to move
		}
	}
	return k
}

// apiServersBehind names the control planes whose kube-apiserver neither
// moves now nor already runs to, each with why: they hold every component
// after the API servers.
func apiServersBehind(to string, ms []KubeMachine, moving map[string][]string) []string {
	var behind []string
	for _, m := range ms {
		switch {
		case !m.ControlPlane || m.Maintenance:
			continue // a control plane in maintenance mode runs no API server
		case slices.Contains(moving[m.Name], talosapi.KubeAPIServer):
		case m.Running == nil:
			behind = append(behind, m.Name+" ("+m.Why+")")
		case !atLeast(talosapi.ImageTag(m.Running.APIServer), to):
			behind = append(behind, fmt.Sprintf("%s (kube-apiserver %s: %s)", m.Name, talosapi.ImageTag(m.Running.APIServer), m.Why))
		}
	}
	return behind
}

// LowestVersion is the lowest of versions by semver ("" when none parses).
func LowestVersion(versions []string) string {
	low, _ := bounds(versions)
	return low
}

// bounds are the lowest and the highest of versions by semver ("" when
// none parses).
func bounds(versions []string) (low, high string) {
	var lv, hv semver.Version
	for _, v := range versions {
		sv, err := semver.ParseTolerant(v)
		if err != nil {
			continue
		}
		if low == "" || sv.LT(lv) {
			low, lv = v, sv
		}
		if high == "" || sv.GT(hv) {
			high, hv = v, sv
		}
	}
	return low, high
}

// atLeast: version v is to or newer; false when either does not parse.
func atLeast(v, to string) bool {
	a, err1 := semver.ParseTolerant(v)
	b, err2 := semver.ParseTolerant(to)
	return err1 == nil && err2 == nil && a.GTE(b)
}
