package reconcile

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The note of due bootstrap manifests on a real API server: written once,
// replaced when the inventory moved on, removed only while it names the
// synced version. An identity that may read the kube-system Namespace but
// not patch it (the API server answers Forbidden) keeps the note in
// memory, and says once, not on every change, that a restart loses it.
func TestManifestsNoteOnTheNamespace(t *testing.T) {
	env, kc := StartTestKube(t, nil)
	ctx := context.Background()
	var said []string
	say := func(format string, args ...any) { said = append(said, fmt.Sprintf(format, args...)) }

	k := &kubeMoves{}
	if due, err := k.due(ctx, kc); due != "" || err != nil {
		t.Fatalf("a new cluster's note: %q, %v; want none", due, err)
	}
	k.mark(ctx, kc, "v1.34.1", say)
	k.mark(ctx, kc, "v1.34.1", say) // a later change toward the same version
	if got, err := readNote(ctx, kc); got != "v1.34.1" || err != nil {
		t.Fatalf("the Namespace's note: %q, %v; want v1.34.1", got, err)
	}
	if len(said) != 1 || !strings.Contains(said[0], "noted on the kube-system Namespace (devata.dev/bootstrap-manifests-due: v1.34.1)") {
		t.Errorf("said %q; want the note said once", said)
	}
	// the inventory moved on: the next move's note replaces it
	k.mark(ctx, kc, "v1.35.0", say)
	if got, _ := readNote(ctx, kc); got != "v1.35.0" || !strings.Contains(said[len(said)-1], "the inventory moved on: the bootstrap manifests of Kubernetes v1.34.1 were never synced") {
		t.Errorf("after a move toward v1.35.0 the note is %q, said %q", got, said[len(said)-1])
	}
	// a sync of the older version leaves the newer note alone
	if err := k.done(ctx, kc, "v1.34.1"); err != nil {
		t.Fatal(err)
	}
	if got, _ := readNote(ctx, kc); got != "v1.35.0" {
		t.Errorf("the sync of v1.34.1 removed the note of v1.35.0: %q", got)
	}
	if err := k.done(ctx, kc, "v1.35.0"); err != nil {
		t.Fatal(err)
	}
	if got, _ := readNote(ctx, kc); got != "" {
		t.Errorf("the note stays after its sync: %q", got)
	}

	// an identity that may get the Namespace and nothing else
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "devata-read-namespaces"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "devata-read-namespaces"},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: "devata-limited"}}}
	if _, err := kc.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg, err := env.User("devata-limited")
	if err != nil {
		t.Fatal(err)
	}
	limited, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the role to take effect", func() bool { _, err := readNote(ctx, limited); return err == nil })

	said = nil
	k = &kubeMoves{}
	k.mark(ctx, limited, "v1.34.1", say)
	k.mark(ctx, limited, "v1.34.1", say)
	if len(said) != 1 {
		t.Fatalf("said %q; want one line, once", said)
	}
	for _, want := range []string{
		"could not be written on the kube-system Namespace",
		`User "devata-limited" cannot patch resource "namespaces"`,
		"grant devata's Kubernetes identity get and patch on namespaces/kube-system",
		"kept in memory only, so a restart before the sync forgets it",
		"talosctl upgrade-k8s --to 1.34.1",
	} {
		if !strings.Contains(said[0], want) {
			t.Errorf("the fallback says %q; want %q in it", said[0], want)
		}
	}
	if got, _ := readNote(ctx, kc); got != "" {
		t.Errorf("a Forbidden patch wrote the note: %q", got)
	}
	if due, err := k.due(ctx, limited); due != "v1.34.1" || err != nil {
		t.Errorf("the note in memory: %q, %v; want v1.34.1", due, err)
	}
	if err := k.done(ctx, limited, "v1.34.1"); err != nil {
		t.Errorf("forgetting the memory's note after a sync: %v", err)
	}
	if due, _ := k.due(ctx, limited); due != "" {
		t.Errorf("the memory's note stays after its sync: %q", due)
	}
	// without a kubeconfig, the memory alone, said once
	said, k = nil, &kubeMoves{}
	k.mark(ctx, nil, "v1.34.1", say)
	k.mark(ctx, nil, "v1.34.1", say)
	if due, _ := k.due(ctx, nil); due != "v1.34.1" || len(said) != 1 || !strings.Contains(said[0], "(devata has no kubeconfig)") {
		t.Errorf("without a kubeconfig: due %q, said %q", due, said)
	}
}

// waitFor polls cond for up to 10 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 200 {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
