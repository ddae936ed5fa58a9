//go:build incluster

package deploy_test

import (
	"bytes"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	stdx509 "crypto/x509"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	authv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/netcheck"
)

// The etcd backup CronJob: no Kubernetes token, no secrets bundle, and the
// os:etcd:backup identity Talos wrote for its talos.dev ServiceAccount is
// enough for a verified snapshot and its sidecar.
func testBackupCronJob(t *testing.T, b *podBed) {
	backups := t.TempDir()
	w := b.workloadOf(t, "CronJob", "devata-etcd-backup", "devata-etcd-backup-29000000-q8z4m", map[string]string{
		podInventoryDir: b.invDir,
		podTalosDir:     b.talosDirs["devata-etcd-backup"],
		"/backups":      backups,
	})
	if !w.noToken {
		t.Errorf("the backup pod mounts a Kubernetes token: it calls no Kubernetes API")
	}
	cmd, stdout, stderr := b.command(t, w, "")
	err := cmd.Run()
	out := fmt.Sprintf("exit %d (%v)\n--- stdout\n%s--- stderr\n%s", cmd.ProcessState.ExitCode(), err, stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("the backup CronJob with its own identity failed:\n%s", out)
	}
	entries, err := os.ReadDir(backups)
	if err != nil {
		t.Fatal(err)
	}
	var db, sidecar int
	for _, e := range entries {
		switch {
		case strings.HasSuffix(e.Name(), ".db"):
			db++
		case strings.HasSuffix(e.Name(), ".json"):
			sidecar++
		}
	}
	if db != 1 || sidecar != 1 {
		t.Errorf("the backup wrote %v, want one snapshot and its sidecar\n%s", entries, out)
	}
}

// What each account may do, asked of the API server as `kubectl auth can-i`
// asks it (SubjectAccessReview), and what the exec policy and Talos refuse
// when tried for real.
func testLeastPrivilege(t *testing.T, b *podBed) {
	kube := kubernetes.NewForConfigOrDie(b.admin)
	ctx := t.Context()

	// Each job's Talos identity carries exactly its role.
	for sa, want := range map[string]string{"devata-reconcile": "os:admin", "devata-drift": "os:admin", "devata-etcd-backup": "os:etcd:backup"} {
		if got := talosRoles(t, filepath.Join(b.talosDirs[sa], "config")); !slices.Equal(got, []string{want}) {
			t.Errorf("Talos identity of %s: roles %v, want [%s]", sa, got, want)
		}
	}

	// Talos gives nothing outside the control planes' allowedRoles and
	// allowedKubernetesNamespaces (inventory/controlplane.yaml).
	dc := dynamic.NewForConfigOrDie(b.admin)
	gvr := schema.GroupVersionResource{Group: "talos.dev", Version: "v1alpha1", Resource: "serviceaccounts"}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := map[[2]string]string{
		{"devata", "devata-reader"}: "Roles not allowed: [os:reader]",
		{"tenant", "devata-drift"}:  "Namespace is not allowed: tenant",
	}
	roles := map[string]string{"devata-reader": "os:reader", "devata-drift": "os:admin"}
	for k := range refused {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "talos.dev/v1alpha1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": k[1], "namespace": k[0]},
			"spec":     map[string]any{"roles": []any{roles[k[1]]}},
		}}
		if _, err := dc.Resource(gvr).Namespace(k[0]).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for k, want := range refused {
		got := ""
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && got == ""; time.Sleep(200 * time.Millisecond) {
			u, err := dc.Resource(gvr).Namespace(k[0]).Get(ctx, k[1], metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got, _, _ = unstructured.NestedString(u.Object, "status", "failureReason")
		}
		if got != want {
			t.Errorf("talos.dev ServiceAccount %s/%s: failureReason %q, want %q", k[0], k[1], got, want)
		}
		if _, err := kube.CoreV1().Secrets(k[0]).Get(ctx, k[1], metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Talos wrote a Secret %s/%s for a refused talos.dev ServiceAccount (%v)", k[0], k[1], err)
		}
	}

	// kubectl auth can-i, for each account.
	type ask struct {
		sa      string
		attrs   authorizationv1.ResourceAttributes
		allowed bool
	}
	lease := func(verb, name string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: "devata", Verb: verb, Group: "coordination.k8s.io", Resource: "leases", Name: name}
	}
	exec := func(ns, pod string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec", Name: pod}
	}
	asks := []ask{
		{"devata-drift", exec("default", "web-0"), false},
		{"devata-drift", exec("devata", "devata-reconcile-6d4cf56db6-q2x8n"), false},
		// RBAC cannot tell pods of kube-system apart: the admission policy
		// does, tried for real below
		{"devata-drift", exec("kube-system", "kube-apiserver-cp-1"), true},
		{"devata-drift", lease("get", "devata-reconcile"), false},
		{"devata-drift", lease("update", "devata-reconcile"), false},
		{"devata-drift", lease("patch", "devata-reconcile"), false},
		{"devata-drift", lease("delete", "devata-reconcile"), false},
		{"devata-drift", lease("create", ""), false},
		{"devata-drift", authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, true},
		{"devata-drift", authorizationv1.ResourceAttributes{Namespace: "devata", Verb: "get", Resource: "secrets", Name: "devata-reconcile"}, false},
		{"devata-reconcile", lease("get", "devata-reconcile"), true},
		{"devata-reconcile", lease("update", "devata-reconcile"), true},
		{"devata-reconcile", lease("update", "another-controller"), false},
		{"devata-reconcile", lease("patch", "devata-reconcile"), false},
		{"devata-reconcile", lease("delete", "devata-reconcile"), false},
		{"devata-reconcile", lease("create", ""), false},
		{"devata-reconcile", exec("default", "web-0"), false},
		{"devata-reconcile", authorizationv1.ResourceAttributes{Verb: "delete", Resource: "nodes", Name: "cp-1"}, false},
		{"devata-etcd-backup", authorizationv1.ResourceAttributes{Verb: "list", Resource: "nodes"}, false},
		{"devata-etcd-backup", lease("get", "devata-reconcile"), false},
		{"devata-etcd-backup", exec("kube-system", "kube-apiserver-cp-1"), false},
	}
	for _, a := range asks {
		attrs := a.attrs
		sar, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:devata:" + a.sa,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:devata", "system:authenticated"},
			ResourceAttributes: &attrs,
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != a.allowed {
			t.Errorf("can %s %s %s/%s in namespace %q (name %q)? %v, want %v (%s)", a.sa, attrs.Verb, attrs.Resource, attrs.Subresource, attrs.Namespace, attrs.Name, sar.Status.Allowed, a.allowed, sar.Status.Reason)
		}
	}

	// The same refusals with the accounts' own tokens, for real: the drift
	// account cannot take or free the writers' Lease, reconcile cannot
	// create another.
	drift, reconcile := b.tokenConfig(t, "devata-drift"), b.tokenConfig(t, "devata-reconcile")
	l, err := kube.CoordinationV1().Leases("devata").Get(ctx, "devata-reconcile", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Spec.HolderIdentity = new("a compromised drift pod")
	if _, err := kubernetes.NewForConfigOrDie(drift).CoordinationV1().Leases("devata").Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the drift account updating the writer Lease: %v, want forbidden", err)
	}
	if _, err := kubernetes.NewForConfigOrDie(reconcile).CoordinationV1().Leases("devata").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "devata-reconcile-0-of-2"}}, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the reconcile account creating a Lease: %v, want forbidden", err)
	}

	// Exec: into the agent's cilium-agent container it works (the drift
	// and reconcile runs above did it too); into any other pod of
	// kube-system, or another container of an agent pod, the admission
	// policy refuses it; elsewhere RBAC does.
	pods, err := kube.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agentName := regexp.MustCompile(`^cilium-[bcdfghjklmnpqrstvwxz2456789]{5}$`)
	var agent, other string
	for _, p := range pods.Items {
		switch {
		case agent == "" && agentName.MatchString(p.Name):
			agent = p.Name
		case other == "" && !strings.HasPrefix(p.Name, "cilium"):
			other = p.Name
		}
	}
	if agent == "" {
		t.Fatalf("no Cilium agent pod in kube-system: %d pods", len(pods.Items))
	}
	// a pod that has the agent's container but not an agent's name
	decoy := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "cilium-operator-5d8f7c9b4-x2k9q", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "cilium"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "cilium-agent", Image: "quay.io/cilium/cilium:v1.20.2"}}},
	}
	if _, err := kube.CoreV1().Pods("kube-system").Create(ctx, decoy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ex, err := netcheck.NewPodsExec(drift)
	if err != nil {
		t.Fatal(err)
	}
	try := func(ns, pod, container string) error {
		_, _, err := ex.Exec(ctx, ns, pod, container, netcheck.AgentCommand(nil))
		return err
	}
	const byPolicy = "devata-exec-cilium-agents-only"
	refusals := []struct{ ns, pod, container, by string }{
		{"kube-system", decoy.Name, "cilium-agent", byPolicy},
		{"kube-system", agent, "mount-cgroup", byPolicy},
		{"default", "web-0", "web", "forbidden"},
	}
	if other != "" {
		refusals = append(refusals, struct{ ns, pod, container, by string }{"kube-system", other, "", byPolicy})
	}
	// the API server loads admission policies asynchronously: wait until
	// the first refusal names it
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		err := try("kube-system", decoy.Name, "cilium-agent")
		if err != nil && strings.Contains(err.Error(), byPolicy) || time.Now().After(deadline) {
			break
		}
	}
	for _, r := range refusals {
		err := try(r.ns, r.pod, r.container)
		if err == nil || !strings.Contains(err.Error(), r.by) {
			t.Errorf("the drift account's exec into %s/%s container %q: %v, want refused (%s)", r.ns, r.pod, r.container, err, r.by)
		} else {
			t.Logf("exec into %s/%s container %q refused: %v", r.ns, r.pod, r.container, err)
		}
	}
	if err := try("kube-system", agent, "cilium-agent"); err != nil {
		t.Errorf("the drift account's exec into the agent %s: %v, want it to work", agent, err)
	}
}

// tokenConfig is a client config with a fresh token of the devata
// ServiceAccount sa and nothing else.
func (b *podBed) tokenConfig(t *testing.T, sa string) *rest.Config {
	t.Helper()
	tok, err := kubernetes.NewForConfigOrDie(b.admin).CoreV1().ServiceAccounts("devata").CreateToken(t.Context(), sa, &authv1.TokenRequest{
		Spec: authv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return &rest.Config{Host: b.admin.Host, BearerToken: tok.Status.Token, TLSClientConfig: rest.TLSClientConfig{CAData: b.admin.CAData}}
}

// talosRoles are the roles (Organization) of the talosconfig's client
// certificate, as Talos' authorizer reads them.
func talosRoles(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientconfig.ReadFrom(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	crtPEM, err := base64.StdEncoding.DecodeString(cfg.Contexts[cfg.Context].Crt)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(crtPEM)
	if block == nil {
		t.Fatalf("%s: no certificate", path)
	}
	crt, err := stdx509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return crt.Subject.Organization
}

// everyGrantNeeded runs drift (through run, as a ServiceAccount) once per
// rule-verb of the drift account's grants, with all of them but that one,
// and fails for a grant whose absence leaves every Kubernetes-side check
// InSync: deploy/ would grant more than drift uses.
func everyGrantNeeded(t *testing.T, b *podBed, run func(sa string) map[string][]junitCase) {
	kube := kubernetes.NewForConfigOrDie(b.admin)
	ctx := t.Context()
	var all []grant
	for _, g := range jobCalls["devata-drift"] {
		for _, v := range strings.Split(g.verbs, ",") {
			one := g
			one.verbs = v
			all = append(all, one)
		}
	}
	for i, drop := range all {
		sa := fmt.Sprintf("devata-drift-minus-%d", i)
		if _, err := kube.CoreV1().ServiceAccounts("devata").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		byNS := map[string][]rbacv1.PolicyRule{}
		for j, g := range all {
			if j == i {
				continue
			}
			r := rbacv1.PolicyRule{APIGroups: []string{g.group}, Resources: []string{g.resource}, Verbs: []string{g.verbs}}
			if g.name != "" {
				r.ResourceNames = []string{g.name}
			}
			byNS[g.namespace] = append(byNS[g.namespace], r)
		}
		subjects := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: "devata"}}
		for ns, rules := range byNS {
			var err error
			if ns == "" {
				if _, err = kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err == nil {
					_, err = kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: sa}}, metav1.CreateOptions{})
				}
			} else {
				if _, err = kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err == nil {
					_, err = kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa}, Subjects: subjects, RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: sa}}, metav1.CreateOptions{})
				}
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		cases := run(sa)
		var lost []string
		for _, check := range kubernetesChecks {
			for _, c := range cases[check] {
				if c.Failure != nil || c.Error != nil {
					lost = append(lost, check+" on "+c.Classname)
				}
			}
		}
		what := drop.expand()[0]
		if len(lost) == 0 {
			t.Errorf("drift without %q: every Kubernetes-side check still InSync: deploy/ grants it and drift does not use it", what)
			continue
		}
		t.Logf("drift without %q: %d results off InSync, e.g. %s", what, len(lost), lost[0])
	}
}
