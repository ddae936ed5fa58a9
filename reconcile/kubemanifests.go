package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// After the last component of a Kubernetes version change moved, devata
// syncs the bootstrap manifests as talosctl upgrade-k8s does (v1.14.1
// pkg/cluster/kubernetes/talos_managed.go Upgrade → PerformManifestsSync):
// it reads the Manifest resources (namespace controlplane, type
// Manifests.kubernetes.talos.dev) from a control plane through COSI
// (go-kubernetes v0.2.41 kubernetes/manifests GetBootstrapManifests), which
// Talos' ManifestController renders from the config the machine runs
// (CoreDNS, kube-proxy when enabled, the bootstrap RBAC, …), and applies
// each object to the API server with server-side apply, field manager
// "talos" (constants.KubernetesFieldManagerName), taking over fields
// another manager set (fluxcd/pkg/ssa applies with ForceOwnership, as
// go-kubernetes' ssa.Manager does). Talos itself only creates what is
// missing, at boot (manifest_apply.go): without this step a cluster
// upgraded from an older Kubernetes keeps the kube-proxy image it was
// built with.
//
// Each change is reported by object: created, configured (with the images
// that change) or unchanged; objects' contents are never printed (a
// Secret's data among them). The plan shows the same as a server-side dry
// run. Then, as ssacli.Wait, devata waits for each changed Deployment and
// DaemonSet to roll out (observed generation, every replica updated, and
// Ready unless no CNI runs in the cluster yet). Unlike talosctl's SSA
// manager it keeps no inventory ConfigMap and prunes nothing (it sets the
// owning-inventory annotation talosctl and Talos set): an object the
// manifests no longer render (kube-proxy after cluster.proxy.disabled)
// stays until someone deletes it; `talosctl upgrade-k8s` with pruning does.

// owningInventory is the annotation naming the inventory an object belongs
// to (go-kubernetes ssa.InventoryAnnotationKey).
const owningInventory = "config.k8s.io/owning-inventory"

// ManifestChange is what syncing one object of the bootstrap manifests did
// or, in a dry run, would do.
type ManifestChange struct {
	// Object names it as kubectl does: "apps/v1 Deployment kube-system/coredns".
	Object string
	// Action is "created", "configured" or "unchanged".
	Action string
	// Images are the containers whose image changes: "coredns: A → B".
	Images []string

	gvk             schema.GroupVersionKind
	namespace, name string
}

// String is the change for people: "configured apps/v1 Deployment
// kube-system/coredns (coredns: A → B)".
func (c ManifestChange) String() string {
	s := c.Action + " " + c.Object
	if len(c.Images) > 0 {
		s += " (" + strings.Join(c.Images, ", ") + ")"
	}
	return s
}

// BootstrapManifests reads the Manifest resources a control plane renders,
// in name order, and returns their objects in order.
func BootstrapManifests(ctx context.Context, c *client.Client) ([]*unstructured.Unstructured, error) {
	list, err := safe.StateList[*k8s.Manifest](ctx, c.COSI, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ManifestType, "", resource.VersionUndefined))
	if err != nil {
		return nil, fmt.Errorf("read the bootstrap manifests (%s): %w", k8s.ManifestType, err)
	}
	var ms []*k8s.Manifest
	for m := range list.All() {
		ms = append(ms, m)
	}
	slices.SortFunc(ms, func(a, b *k8s.Manifest) int { return strings.Compare(a.Metadata().ID(), b.Metadata().ID()) })
	var out []*unstructured.Unstructured
	for _, m := range ms {
		for _, item := range m.TypedSpec().Items {
			out = append(out, (&unstructured.Unstructured{Object: item.Object}).DeepCopy())
		}
	}
	return out, nil
}

// SyncManifests server-side applies objects (a dry run when dryRun) with
// field manager "talos", in talosctl's stages and order
// (kubemanifests_order.go), and reports each one's change in the order
// applied; the first object that fails stops it, after the changes made
// so far, with a *ManifestError naming the object. A dry run does not
// wait between stages: an object whose CRD or Namespace the same sync
// would create first is reported created.
func SyncManifests(ctx context.Context, kube kubernetes.Interface, objects []*unstructured.Unstructured, dryRun bool) ([]ManifestChange, error) {
	s := &ssa{kube: kube, resources: map[schema.GroupVersion][]metav1.APIResource{}}
	var out []ManifestChange
	for _, stage := range manifestStages(slices.Clone(objects)) {
		for _, obj := range stage.objects {
			ch, err := s.apply(ctx, obj, dryRun)
			if err != nil && dryRun && (isNotServed(err) || apierrors.IsNotFound(err)) && definedLater(obj, objects) {
				ch.Action, err = "created", nil
			}
			if err != nil {
				return out, &ManifestError{Object: obj, Err: err}
			}
			out = append(out, ch)
		}
		if stage.ready && !dryRun {
			if err := s.waitReady(ctx, stage.objects); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// notServedError: discovery does not know the object's kind (yet).
type notServedError struct{ err error }

func (e *notServedError) Error() string { return e.err.Error() }
func (e *notServedError) Unwrap() error { return e.err }

func isNotServed(err error) bool {
	_, ok := errors.AsType[*notServedError](err)
	return ok
}

// ManifestError is a sync that failed at one object.
type ManifestError struct {
	Object *unstructured.Unstructured
	Err    error
}

func (e *ManifestError) Error() string { return e.Err.Error() }
func (e *ManifestError) Unwrap() error { return e.Err }

// failedAt is the object a sync failed at, else the first one.
func failedAt(err error, objs []*unstructured.Unstructured) *unstructured.Unstructured {
	if me, ok := errors.AsType[*ManifestError](err); ok {
		return me.Object
	}
	if len(objs) == 0 {
		return &unstructured.Unstructured{Object: map[string]any{}}
	}
	return objs[0]
}

// ssa applies objects through the API server's REST paths: devata holds a
// kubernetes.Interface, whose discovery finds each kind's resource.
type ssa struct {
	kube      kubernetes.Interface
	resources map[schema.GroupVersion][]metav1.APIResource
}

// path is the object's REST path, from discovery.
func (s *ssa) path(gvk schema.GroupVersionKind, namespace, name string) (string, error) {
	gv := gvk.GroupVersion()
	rs, ok := s.resources[gv]
	if !ok {
		list, err := s.kube.Discovery().ServerResourcesForGroupVersion(gv.String())
		if err != nil {
			return "", &notServedError{fmt.Errorf("the API server does not serve %s: %w", gv, err)}
		}
		rs = list.APIResources
		s.resources[gv] = rs
	}
	i := slices.IndexFunc(rs, func(r metav1.APIResource) bool { return r.Kind == gvk.Kind && !strings.Contains(r.Name, "/") })
	if i < 0 {
		return "", &notServedError{fmt.Errorf("the API server serves no %s in %s", gvk.Kind, gv)}
	}
	p := "/apis/" + gv.Group + "/" + gv.Version
	if gv.Group == "" {
		p = "/api/" + gv.Version
	}
	if rs[i].Namespaced {
		if namespace == "" {
			namespace = metav1.NamespaceDefault // as ManifestApplyController defaults it
		}
		p += "/namespaces/" + namespace
	}
	return p + "/" + rs[i].Name + "/" + name, nil
}

// apply applies one object and compares it before and after.
func (s *ssa) apply(ctx context.Context, obj *unstructured.Unstructured, dryRun bool) (ManifestChange, error) {
	gvk := obj.GroupVersionKind()
	ch := ManifestChange{gvk: gvk, namespace: obj.GetNamespace(), name: obj.GetName()}
	ch.Object = gvk.GroupVersion().String() + " " + gvk.Kind + " " + obj.GetName()
	if obj.GetNamespace() != "" {
		ch.Object = gvk.GroupVersion().String() + " " + gvk.Kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	path, err := s.path(gvk, obj.GetNamespace(), obj.GetName())
	if err != nil {
		return ch, fmt.Errorf("%s: %w", ch.Object, err)
	}
	rc := s.kube.Discovery().RESTClient()
	var before map[string]any
	raw, err := rc.Get().AbsPath(path).SetHeader("Accept", "application/json").DoRaw(ctx)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ch, fmt.Errorf("read %s: %w", ch.Object, apiAnswer(raw, err))
	default:
		if err := json.Unmarshal(raw, &before); err != nil {
			return ch, fmt.Errorf("read %s: %w", ch.Object, err)
		}
	}
	// the annotation talosctl's SSA manager puts on every object it applies
	// (go-kubernetes ssa/apply.go prepareObjects), as Talos' boot-time
	// apply does: owned by "talos", it would be removed if left out
	obj = obj.DeepCopy()
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	if v, ok := ann[owningInventory]; ok && v != constants.KubernetesBootstrapManifestsInventoryName {
		return ch, fmt.Errorf("%s already has an inventory annotation (%s: %s)", ch.Object, owningInventory, v)
	}
	ann[owningInventory] = constants.KubernetesBootstrapManifestsInventoryName
	obj.SetAnnotations(ann)
	body, err := json.Marshal(obj.Object)
	if err != nil {
		return ch, fmt.Errorf("%s: %w", ch.Object, err)
	}
	req := rc.Patch(types.ApplyPatchType).AbsPath(path).SetHeader("Accept", "application/json").
		Param("fieldManager", constants.KubernetesFieldManagerName).Param("force", "true").Body(body)
	if dryRun {
		req = req.Param("dryRun", "All")
	}
	raw, err = req.DoRaw(ctx)
	if err != nil {
		return ch, fmt.Errorf("server-side apply %s: %w", ch.Object, apiAnswer(raw, err))
	}
	var after map[string]any
	if err := json.Unmarshal(raw, &after); err != nil {
		return ch, fmt.Errorf("server-side apply %s: %w", ch.Object, err)
	}
	switch {
	case before == nil:
		ch.Action = "created"
	case reflect.DeepEqual(withoutBookkeeping(before), withoutBookkeeping(after)):
		ch.Action = "unchanged"
	default:
		ch.Action = "configured"
		ch.Images = imageChanges(before, after)
	}
	return ch, nil
}

// apiAnswer is err with the API server's words: the discovery client's
// REST client decodes no Status, so its errors say "unknown" and the
// words are in the body. An Invalid message quotes the object's values
// (a Secret's among them), so only its fields are kept.
func apiAnswer(raw []byte, err error) error {
	var st metav1.Status
	if err == nil || json.Unmarshal(raw, &st) != nil || st.Kind != "Status" || st.Status != metav1.StatusFailure {
		return err
	}
	if st.Reason == metav1.StatusReasonInvalid {
		var fields []string
		if st.Details != nil {
			for i, c := range st.Details.Causes {
				fields = append(fields, c.Field)
				st.Details.Causes[i].Message = ""
			}
		}
		st.Message = "the API server found it invalid (fields: " + strings.Join(fields, ", ") + ")"
	}
	return &apierrors.StatusError{ErrStatus: st}
}

// withoutBookkeeping is an object without what every write changes (bookkeeping
// and status).
func withoutBookkeeping(obj map[string]any) map[string]any {
	u := (&unstructured.Unstructured{Object: obj}).DeepCopy()
	for _, f := range []string{"managedFields", "resourceVersion", "generation"} {
		unstructured.RemoveNestedField(u.Object, "metadata", f)
	}
	delete(u.Object, "status")
	return u.Object
}

// imageChanges lists the pod template's containers whose image changes.
func imageChanges(before, after map[string]any) []string {
	images := func(obj map[string]any) map[string]string {
		out := map[string]string{}
		for _, kind := range []string{"containers", "initContainers"} {
			cs, _, _ := unstructured.NestedSlice(obj, "spec", "template", "spec", kind)
			for _, c := range cs {
				if m, ok := c.(map[string]any); ok {
					name, _ := m["name"].(string)
					image, _ := m["image"].(string)
					out[name] = image
				}
			}
		}
		return out
	}
	b, a := images(before), images(after)
	var out []string
	for _, name := range slices.Sorted(maps.Keys(a)) {
		if b[name] != a[name] {
			out = append(out, fmt.Sprintf("%s: %s → %s", name, orNone(b[name]), a[name]))
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// manifestsFrom reads the bootstrap manifests from the first control plane
// that answers, as talosctl reads them from its first control plane.
func manifestsFrom(ctx context.Context, dial func(context.Context, *inventory.Machine) (*client.Client, error), cps []*inventory.Machine) ([]*unstructured.Unstructured, string, error) {
	var errs []error
	for _, m := range cps {
		c, err := dial(ctx, m)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		objs, err := BootstrapManifests(ctx, c)
		c.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
			continue
		}
		return objs, m.Name, nil
	}
	if len(errs) == 0 {
		return nil, "", errors.New("the inventory has no control plane")
	}
	return nil, "", errors.Join(errs...)
}

// syncManifests is the last step of a rollout: the bootstrap manifests
// synced when the note says they are due for the inventory's Kubernetes
// version and every machine runs it (kubemanifests_note.go), then the
// changed Deployments and DaemonSets waited for. Nothing happens without
// a note, nor when the plan's version change was refused, nor in a
// change of the loop: its pass syncs, between audit records
// (loop_manifests.go).
func (r *Rollout) syncManifests(ctx context.Context, plan *Plan, out *RolloutResult) error {
	if k := plan.Kubernetes; k != nil && k.Refused != "" || !out.Done() || r.fleet != nil {
		return nil
	}
	return r.SyncDueManifests(ctx)
}

// SyncDueManifests syncs the bootstrap manifests when the note on the
// kube-system Namespace (or this process' memory) says they are due for
// the inventory's Kubernetes version and every machine of the inventory
// runs it, and then removes the note; it says what it did or why it
// waits. devata apply calls it at the end of every rollout (Run does) and
// when it has nothing to change, so that a Kubernetes version change
// another run (or a loop that stopped) left unsynced is synced.
func (r *Rollout) SyncDueManifests(ctx context.Context) error {
	to, ok := r.manifestsDue(ctx)
	if !ok {
		return nil
	}
	if _, err := r.syncBootstrapManifests(ctx, to); err != nil {
		return err
	}
	if err := r.notes().done(ctx, r.Kube, to); err != nil {
		r.say("    %v; the next run syncs them again (no change)", err)
	}
	return nil
}

// manifestsDue is the inventory's Kubernetes version and true when its
// bootstrap manifests are due and every machine runs it; it says why
// they wait otherwise.
func (r *Rollout) manifestsDue(ctx context.Context) (string, bool) {
	to := r.Inventory.Cluster.KubernetesVersion
	rctx, cancel := context.WithTimeout(ctx, r.Timeout)
	due, _ := r.notes().due(rctx, r.Kube)
	cancel()
	switch {
	case due == "":
		return "", false
	case due != to:
		r.say("==> bootstrap manifests: the inventory moved on: those of Kubernetes %s were never synced, and the inventory says %s; the next change toward it replaces the note (%s on the kube-system Namespace)", due, to, ManifestsDueAnnotation)
		r.notes().forget(due)
		return "", false
	}
	if behind := kubeBehind(ctx, r.Dialer, r.Inventory, to, prePullConcurrency, r.Timeout); len(behind) > 0 {
		r.say("==> bootstrap manifests of Kubernetes %s: due, synced once every machine runs it: %s", to, strings.Join(behind, "; "))
		return "", false
	}
	return to, true
}

// notes is what this rollout knows of the note: the loop's Reconciler's,
// or the rollout's own.
func (r *Rollout) notes() *kubeMoves {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.due == nil {
		r.due = &kubeMoves{}
	}
	return r.due
}

// syncBootstrapManifests syncs the bootstrap manifests once every
// component runs Kubernetes to (the end of a version change made by a
// rollout, or by the loop's changes: loop_manifests.go), then waits for
// the changed Deployments and DaemonSets. It returns the changes made
// (all of them when it failed part way).
func (r *Rollout) syncBootstrapManifests(ctx context.Context, to string) ([]ManifestChange, error) {
	retry := "every component moved; to sync them again run talosctl upgrade-k8s --to " + strings.TrimPrefix(to, "v") + " against a control plane"
	if r.Kube == nil {
		return nil, errors.New("the bootstrap manifests (CoreDNS, kube-proxy) were not synced: devata has no kubeconfig (pass --kubeconfig or set KUBECONFIG); " + retry)
	}
	r.say("==> bootstrap manifests: server-side apply as talosctl upgrade-k8s (field manager %s)", constants.KubernetesFieldManagerName)
	sctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	objs, from, err := manifestsFrom(sctx, r.Dialer.Client, r.Inventory.ControlPlanes())
	if err != nil {
		return nil, fmt.Errorf("the bootstrap manifests could not be read from a control plane: %w; %s", err, retry)
	}
	changes, err := SyncManifests(sctx, r.Kube, objs, false)
	counts := map[string]int{}
	for _, c := range changes {
		counts[c.Action]++
		if c.Action != "unchanged" {
			r.say("    %s", c)
		}
	}
	r.say("    %d objects of %s's manifests: %d created, %d configured, %d unchanged", len(objs), from, counts["created"], counts["configured"], counts["unchanged"])
	if err != nil {
		// by the object and the API server's reason: a refused apply's
		// message may quote the object's fields
		return changes, &safeErr{msg: "syncing the bootstrap manifests: " + applyFailure("server-side apply", failedAt(err, objs), err) + "; " + retry, err: err}
	}
	for _, c := range changes {
		if c.Action == "unchanged" || c.gvk.Group != "apps" || c.gvk.Kind != "Deployment" && c.gvk.Kind != "DaemonSet" {
			continue
		}
		if err := r.waitRolledOut(ctx, c); err != nil {
			return changes, err
		}
		r.say("    %s %s/%s rolled out", c.gvk.Kind, c.namespace, c.name)
	}
	return changes, nil
}

// kubeBehind names the machines of inv whose applied config does not run
// every Kubernetes component at to, each with what it runs (or why it
// could not be read); machines in maintenance mode run none and are not
// behind.
func kubeBehind(ctx context.Context, dialer *talosapi.Dialer, inv *inventory.Inventory, to string, concurrency int, timeout time.Duration) []string {
	ms := make([]*inventory.Machine, len(inv.Machines))
	behind := make([]string, len(ms))
	for i := range inv.Machines {
		ms[i] = &inv.Machines[i]
		behind[i] = ms[i].Name + ": not observed" // until its look says otherwise
	}
	_ = talosapi.ForEach(ctx, ms, concurrency, timeout, func(ctx context.Context, m *inventory.Machine) error {
		behind[slices.Index(ms, m)] = kubeBehindOne(talosapi.Observe(ctx, dialer, m), to)
		return nil
	})
	return slices.DeleteFunc(behind, func(s string) bool { return s == "" })
}

// kubeBehindOne says how one observed machine is behind Kubernetes to, or "".
func kubeBehindOne(o *talosapi.Observation, to string) string {
	name := o.Machine.Name
	switch {
	case o.Maintenance:
		return ""
	case o.Err != nil:
		return name + ": " + o.Err.Error()
	case o.ConfigErr != nil:
		return name + ": " + o.ConfigErr.Error()
	}
	k, err := talosapi.KubeComponentsOf(o.Active)
	if err != nil {
		return name + ": " + err.Error()
	}
	for _, v := range k.Versions() {
		if strings.TrimPrefix(v, "v") != strings.TrimPrefix(to, "v") {
			return name + " runs " + strings.Join(k.Versions(), ", ")
		}
	}
	return ""
}

// waitRolledOut polls until a Deployment or DaemonSet runs its current
// template everywhere (go-kubernetes manifests WaitForRollout's
// conditions), Ready unless no CNI runs in the cluster: pods on the pod
// network cannot be Ready without one.
func (r *Rollout) waitRolledOut(ctx context.Context, c ManifestChange) error {
	what := c.gvk.Kind + " " + c.namespace + "/" + c.name
	return r.poll(ctx, what+" to roll out", func() string {
		octx, cancel := context.WithTimeout(ctx, r.Timeout)
		defer cancel()
		var gen, observed int64
		var want, updated, ready int32
		if c.gvk.Kind == "Deployment" {
			d, err := r.Kube.AppsV1().Deployments(c.namespace).Get(octx, c.name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			gen, observed, updated, ready = d.Generation, d.Status.ObservedGeneration, d.Status.UpdatedReplicas, d.Status.ReadyReplicas
			want = 1
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
		} else {
			d, err := r.Kube.AppsV1().DaemonSets(c.namespace).Get(octx, c.name, metav1.GetOptions{})
			if err != nil {
				return err.Error()
			}
			gen, observed, want, updated, ready = d.Generation, d.Status.ObservedGeneration, d.Status.DesiredNumberScheduled, d.Status.UpdatedNumberScheduled, d.Status.NumberReady
		}
		switch {
		case observed < gen:
			return fmt.Sprintf("generation %d not observed yet (%d)", gen, observed)
		case updated < want:
			return fmt.Sprintf("%d of %d updated", updated, want)
		case ready < want:
			if runs, _, _ := r.cniRuns(ctx); runs {
				return fmt.Sprintf("%d of %d Ready", ready, want)
			}
		}
		return ""
	}, func(last string) error {
		return fmt.Errorf("%s did not roll out within %s: %s; see kubectl -n %s rollout status %s/%s", what, r.Wait, last, c.namespace, strings.ToLower(c.gvk.Kind), c.name)
	})
}

// manifestsDryRun is what syncing the bootstrap manifests would change now
// (a server-side dry run), for the plan: the manifests as rendered from
// the configs the machines run before the change.
func (p *Planner) manifestsDryRun(ctx context.Context) []string {
	if p.Kube == nil {
		return []string{"not dry-run: devata has no kubeconfig"}
	}
	dctx, cancel := context.WithTimeout(ctx, p.Timeout)
	defer cancel()
	objs, from, err := manifestsFrom(dctx, p.Dialer.Client, p.Inventory.ControlPlanes())
	if err != nil {
		return []string{"not dry-run: " + err.Error()}
	}
	changes, err := SyncManifests(dctx, p.Kube, objs, true)
	var out []string
	n := 0
	for _, c := range changes {
		if c.Action != "unchanged" {
			out = append(out, "would be "+c.String())
		} else {
			n++
		}
	}
	if err != nil {
		out = append(out, applyFailure("the dry run", failedAt(err, objs), err)+" (talosctl upgrade-k8s --dry-run against a control plane shows its message)")
	}
	return append(out, fmt.Sprintf("%d of %d objects of %s's manifests unchanged", n, len(objs), from))
}

// applyFailure says that applying obj (what: "the dry run", "server-side
// apply") failed by the object and the API server's reason alone: the
// message of a refused apply may quote the object's fields, and devata
// shows objects and images, never contents.
func applyFailure(what string, obj *unstructured.Unstructured, err error) string {
	name := obj.GroupVersionKind().GroupVersion().String() + " " + obj.GetKind() + " " + obj.GetName()
	if obj.GetNamespace() != "" {
		name = obj.GroupVersionKind().GroupVersion().String() + " " + obj.GetKind() + " " + obj.GetNamespace() + "/" + obj.GetName()
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) {
		s := st.Status()
		return fmt.Sprintf("%s failed at %s: the API server answered %d %s", what, name, s.Code, s.Reason)
	}
	return fmt.Sprintf("%s failed at %s: %v", what, name, err)
}
