package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

// The note that the bootstrap manifests are due. A Kubernetes version
// change ends with their sync (kubemanifests.go), and only once every
// machine runs the new version; the change that makes the last move does
// not know it was the last (the loop changes one machine at a time, an
// apply may stop part way). So before the first change that moves a
// component to version V is sent, devata writes the annotation
// ManifestsDueAnnotation: V on the kube-system Namespace (which Kubernetes
// always has: the API server's system namespaces controller keeps it),
// and after a successful sync of V it removes it, only if it still says V.
// Whoever finds the note naming the inventory's version while every
// machine runs it (a pass of the loop, a restarted one included, or
// devata apply) syncs. With no note nothing is synced: an operator's own
// edit of CoreDNS stays. A note naming another version than the
// inventory's is said ("the inventory moved on") and replaced by the note
// of the next move.
//
// Where the note cannot be written (no kubeconfig, or the API server
// forbids it) it is kept in memory, and said once: a restart before the
// sync loses it.

// ManifestsDueAnnotation is the annotation on the kube-system Namespace
// that names the Kubernetes version whose bootstrap manifests are due.
const ManifestsDueAnnotation = "devata.dev/bootstrap-manifests-due"

// noteNamespace holds the note.
const noteNamespace = metav1.NamespaceSystem

// kubeMoves is where a process keeps what it knows of the note besides
// the Namespace: the note itself when the Namespace could not be written,
// and what it said once. The loop's Reconciler holds one for all its
// changes; a Rollout of devata apply has its own.
type kubeMoves struct {
	mu sync.Mutex
	// mem is the version noted in memory (the Namespace could not be
	// written); said the version whose fallback was said.
	mem, said string
	// refused is the version whose sync the API server forbade this
	// process: the loop does not try it again until it restarts.
	refused string
	// first lets one change at a time make the first move toward a
	// version (its pulls and the note), so that no other moves before it.
	first sync.Mutex
}

// readNote is the version the kube-system Namespace's note names ("" for none).
func readNote(ctx context.Context, kube kubernetes.Interface) (string, error) {
	ns, err := kube.CoreV1().Namespaces().Get(ctx, noteNamespace, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	return ns.Annotations[ManifestsDueAnnotation], nil
}

// writeNote makes the note name to and returns what it named before; it
// writes nothing when it names to already.
func writeNote(ctx context.Context, kube kubernetes.Interface, to string) (string, error) {
	was, err := readNote(ctx, kube)
	if err != nil || was == to {
		return was, err
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{ManifestsDueAnnotation: to}}})
	if err != nil {
		return was, err
	}
	_, err = kube.CoreV1().Namespaces().Patch(ctx, noteNamespace, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "devata"})
	return was, err
}

// clearNote removes the note if it still names to: a JSON patch whose
// test makes the API server refuse it when the note changed meanwhile.
func clearNote(ctx context.Context, kube kubernetes.Interface, to string) error {
	path := "/metadata/annotations/" + strings.ReplaceAll(strings.ReplaceAll(ManifestsDueAnnotation, "~", "~0"), "/", "~1")
	patch, err := json.Marshal([]map[string]string{{"op": "test", "path": path, "value": to}, {"op": "remove", "path": path}})
	if err != nil {
		return err
	}
	_, err = kube.CoreV1().Namespaces().Patch(ctx, noteNamespace, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: "devata"})
	if err != nil {
		if now, rerr := readNote(ctx, kube); rerr == nil && now != to {
			return nil // another version's note, or none: not this one's to remove
		}
	}
	return err
}

// due is the version whose bootstrap manifests the note says are due:
// the Namespace's note, else the one kept in memory; err says why the
// Namespace could not be read (then the memory's note counts alone).
func (k *kubeMoves) due(ctx context.Context, kube kubernetes.Interface) (string, error) {
	var err error
	if kube != nil {
		var v string
		if v, err = readNote(ctx, kube); err == nil && v != "" {
			return v, nil
		}
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.mem, err
}

// mark writes the note that to's manifests are due before the first
// change toward to is sent, saying what it did; where the Namespace
// cannot be written it keeps the note in memory and says once why a
// restart loses it.
func (k *kubeMoves) mark(ctx context.Context, kube kubernetes.Interface, to string, say func(string, ...any)) {
	if kube == nil {
		k.fallback(to, "devata has no kubeconfig", say)
		return
	}
	was, err := writeNote(ctx, kube, to)
	if err != nil {
		why := err.Error()
		if apierrors.IsForbidden(err) {
			why += "; grant devata's Kubernetes identity get and patch on namespaces/kube-system (in a pod: add deploy/components/kubernetes-upgrade)"
		}
		k.fallback(to, why, say)
		return
	}
	k.mu.Lock()
	k.mem = ""
	k.mu.Unlock()
	switch {
	case was == to:
	case was != "":
		say("  the inventory moved on: the bootstrap manifests of Kubernetes %s were never synced; the note on the kube-system Namespace (%s) now names %s", was, ManifestsDueAnnotation, to)
	default:
		say("  noted on the kube-system Namespace (%s: %s): the bootstrap manifests are synced once every machine runs it, by this run or a later one", ManifestsDueAnnotation, to)
	}
}

// fallback keeps the note of to in memory and says so once for to.
func (k *kubeMoves) fallback(to, why string, say func(string, ...any)) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mem != "" && k.mem != to {
		say("  the inventory moved on: the bootstrap manifests of Kubernetes %s were never synced; the note now names %s", k.mem, to)
	}
	k.mem = to
	if k.said == to {
		return
	}
	k.said = to
	say("  the note that the bootstrap manifests of Kubernetes %s are due could not be written on the kube-system Namespace (%s): it is kept in memory only, so a restart before the sync forgets it; then sync them with talosctl upgrade-k8s --to %s against a control plane",
		to, why, strings.TrimPrefix(to, "v"))
}

// done forgets the note of to once its manifests were synced: in memory,
// and on the Namespace if it still names to.
func (k *kubeMoves) done(ctx context.Context, kube kubernetes.Interface, to string) error {
	k.mu.Lock()
	if k.mem == to {
		k.mem = ""
	}
	k.mu.Unlock()
	if kube == nil {
		return nil
	}
	if err := clearNote(ctx, kube, to); err != nil {
		return fmt.Errorf("remove the note %s: %s from the kube-system Namespace: %w", ManifestsDueAnnotation, to, err)
	}
	return nil
}

// forget drops a note of the memory that names from (the inventory moved
// on from it); the Namespace's note is replaced by the next move's.
func (k *kubeMoves) forget(from string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.mem == from {
		k.mem = ""
	}
}

// refuse remembers that the API server forbade the sync of to.
func (k *kubeMoves) refuse(to string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refused = to
}

// refusedFor reports whether the API server forbade the sync of to.
func (k *kubeMoves) refusedFor(to string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.refused == to
}

// movesTo is the version the actions move Kubernetes components to; ""
// when none moves a component.
func movesTo(actions []Action) string {
	for _, a := range actions {
		if a.Kubernetes == nil {
			continue
		}
		for _, ph := range a.Kubernetes.Phases {
			if ph.Component != "" {
				return a.Kubernetes.To
			}
		}
	}
	return ""
}

// safeErr is an error whose text names the object and the API server's
// reason alone, and still unwraps to the API server's status.
type safeErr struct {
	msg string
	err error
}

func (e *safeErr) Error() string { return e.msg }
func (e *safeErr) Unwrap() error { return e.err }
