package deploy_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// The Kubernetes calls each job makes, as rules: namespace ("" cluster-wide),
// API group, resource, resource name ("" any), verbs. Derived from the
// client-go calls in devata's code, named next to each; the test below
// holds deploy/'s RBAC to exactly these, so a grant no call needs, or a
// call without its grant, fails here.
var jobCalls = map[string][]grant{
	"devata-reconcile": append(slices.Clone(checkCalls),
		// reconcile/leader.go: client-go leader election (Get, Update; Create
		// only when the Lease is missing, and lease.yaml creates it)
		grant{"devata", "coordination.k8s.io", "leases", "devata-reconcile", "get,update"},
		// reconcile/kubernetes.go waitKubelet: a machine's Node
		grant{"", "", "nodes", "", "get"},
		// reconcile/kubedeprecated.go: the API server's metrics, before a
		// Kubernetes minor upgrade (a non-resource URL)
		grant{"", "", "nonResourceURL /metrics", "", "get"},
	),
	"devata-drift": checkCalls,
	// devata backup etcd talks to Talos and the object store only
	// (cmd/devata/backup.go, backup/)
	"devata-etcd-backup": nil,
	// devata backup verify talks to the object store only (backup/verify.go)
	"devata-etcd-verify": nil,
}

// checkCalls are the drift checks' reads, shared by reconcile and drift.
var checkCalls = []grant{
	// talosapi/kube.go ObserveNodes (kubelet check), netcheck/cluster.go
	// (node labels)
	{"", "", "nodes", "", "list"},
	// netcheck/cluster.go ObserveCluster and listNodeConfigs: agent pods and
	// kube-proxy pods in any namespace, the agent's DaemonSet, its
	// ConfigMap, the kubernetes Service and its EndpointSlices, the
	// CiliumNodeConfigs
	{"", "", "pods", "", "list"},
	{"", "", "configmaps", "cilium-config", "get"},
	{"", "", "services", "kubernetes", "get"},
	{"", "apps", "daemonsets", "", "list"},
	{"", "discovery.k8s.io", "endpointslices", "", "list"},
	{"", "cilium.io", "ciliumnodeconfigs", "", "list"},
	// dnscheck/dnscheck.go Observe: the CoreDNS Deployments and the kube-dns
	// Service (its pods and EndpointSlices are listed above)
	{"", "", "services", "kube-dns", "get"},
	{"", "apps", "deployments", "", "list"},
	// netcheck/exec.go: cilium-dbg in the agent pods (WebSocket GET, SPDY POST)
	{"kube-system", "", "pods/exec", "", "get,create"},
}

// upgradeCalls are what components/kubernetes-upgrade adds for reconcile.
// reconcile/kubemanifests.go SyncManifests gets each object of the
// bootstrap manifests, server-side applies it (patch; a missing one is a
// create of its name) and gets the Deployment and DaemonSet while they
// roll out: the objects a Talos v1.14.1 control plane renders
// (controllers/k8s/manifest.go render), the bootstrap token's name as the
// overlay testdata/kubernetes-upgrade sets it.
var upgradeCalls = []grant{
	{"kube-system", "", "secrets", "bootstrap-token-25p8ak", "get,patch,create"},
	{"kube-system", "", "configmaps", "coredns", "get,patch,create"},
	{"kube-system", "", "configmaps", "kubeconfig-in-cluster", "get,patch,create"},
	{"kube-system", "", "serviceaccounts", "coredns", "get,patch,create"},
	{"kube-system", "", "serviceaccounts", "kube-proxy", "get,patch,create"},
	{"kube-system", "", "services", "kube-dns", "get,patch,create"},
	{"kube-system", "apps", "deployments", "coredns", "get,patch,create"},
	{"kube-system", "apps", "daemonsets", "kube-proxy", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterroles", "system:coredns", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterroles", "system:talos-nodes", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterrolebindings", "system:coredns", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterrolebindings", "system:talos-nodes", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterrolebindings", "kube-proxy", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterrolebindings", "system-bootstrap-node-bootstrapper", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterrolebindings", "system-bootstrap-approve-node-client-csr", "get,patch,create"},
	{"", "rbac.authorization.k8s.io", "clusterrolebindings", "system-bootstrap-node-renewal", "get,patch,create"},
	{"", "apiextensions.k8s.io", "customresourcedefinitions", "serviceaccounts.talos.dev", "get,patch,create"},
	// the three CSR bindings' roles: bind instead of holding them (RBAC's
	// escalation check on a binding's update)
	{"", "rbac.authorization.k8s.io", "clusterroles", "system:node-bootstrapper", "bind"},
	{"", "rbac.authorization.k8s.io", "clusterroles", "system:certificates.k8s.io:certificatesigningrequests:nodeclient", "bind"},
	{"", "rbac.authorization.k8s.io", "clusterroles", "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", "bind"},
	// the note that a sync is due: the annotation
	// devata.dev/bootstrap-manifests-due on the kube-system Namespace
	{"", "", "namespaces", "kube-system", "get,patch"},
	// Node labels and taints set through the Kubernetes API (the
	// annotations devata.dev/owned-labels, devata.dev/owned-taints)
	{"", "", "nodes", "", "update,patch"},
	// Held, not called: RBAC updates a ClusterRole or a binding only for a
	// writer that holds what it grants: system:coredns, system:talos-nodes
	// and system:node-proxier (kube-proxy's binding). kubeupgrade_test.go
	// shows each is needed.
	{"", "", "endpoints", "", "list,watch"},
	{"", "", "services", "", "list,watch"},
	{"", "", "pods", "", "list,watch"},
	{"", "", "namespaces", "", "list,watch"},
	{"", "", "nodes", "", "get,list,watch"},
	{"", "discovery.k8s.io", "endpointslices", "", "get,list,watch"},
	{"", "", "events", "", "create,update,patch"},
	{"", "events.k8s.io", "events", "", "create,update,patch"},
	{"", "networking.k8s.io", "servicecidrs", "", "list,watch"},
}

type grant struct{ namespace, group, resource, name, verbs string }

// expand lists a grant one verb at a time, as a comparable key.
func (g grant) expand() []string {
	var out []string
	for _, v := range strings.Split(g.verbs, ",") {
		out = append(out, fmt.Sprintf("%s %s in namespace %q (group %q, name %q)", v, g.resource, g.namespace, g.group, g.name))
	}
	return out
}

// The kustomizations the manifest tests build: deploy/ as it is, and
// deploy/ with the opt-in component components/kubernetes-upgrade, added
// by an overlay (testdata/kubernetes-upgrade) as an operator adds it.
const (
	baseBuild    = "deploy/"
	upgradeBuild = "deploy/ with components/kubernetes-upgrade"
)

var builds = []string{baseBuild, upgradeBuild}

// forEachBuild runs f as a subtest on each of builds.
func forEachBuild(t *testing.T, f func(t *testing.T, which string, res resmap.ResMap)) {
	for _, which := range builds {
		t.Run(which, func(t *testing.T) { f(t, which, buildOf(t, which)) })
	}
}

// buildOf renders one of builds. The overlay cannot sit inside deploy/
// (kustomize refuses a base that contains its overlay), so it is built
// beside a copy of deploy/ in memory, as overlays/… sits beside deploy/ in
// an operator's repository.
func buildOf(t *testing.T, which string) resmap.ResMap {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	if which == baseBuild {
		res, err := k.Run(filesys.MakeFsOnDisk(), ".")
		if err != nil {
			t.Fatalf("kustomize build deploy/: %v", err)
		}
		return res
	}
	fs := filesys.MakeFsInMemory()
	err := filepath.WalkDir(".", func(path string, d os.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && path == "testdata":
			return filepath.SkipDir
		case d.IsDir() || strings.HasSuffix(path, ".go"):
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return fs.WriteFile(filepath.Join("/deploy", path), data)
	})
	if err != nil {
		t.Fatal(err)
	}
	overlay, err := os.ReadFile("testdata/kubernetes-upgrade/kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.WriteFile("/overlay/kustomization.yaml", overlay); err != nil {
		t.Fatal(err)
	}
	res, err := k.Run(fs, "/overlay")
	if err != nil {
		t.Fatalf("kustomize build of %s (testdata/kubernetes-upgrade): %v", which, err)
	}
	return res
}

func find(res resmap.ResMap, kind, name string) *resource.Resource {
	for _, r := range res.Resources() {
		if r.GetKind() == kind && r.GetName() == name {
			return r
		}
	}
	return nil
}

// Each job runs as its own ServiceAccount, and the RBAC bound to each is
// exactly what its calls need (jobCalls): no wildcard, nothing more.
func TestKustomizeLeastPrivilegeRBAC(t *testing.T) {
	forEachBuild(t, func(t *testing.T, which string, res resmap.ResMap) {
		calls := jobCalls
		if which == upgradeBuild {
			calls = maps.Clone(jobCalls)
			calls["devata-reconcile"] = append(slices.Clone(calls["devata-reconcile"]), upgradeCalls...)
		}
		leastPrivilegeRBAC(t, res, calls)
	})
}

func leastPrivilegeRBAC(t *testing.T, res resmap.ResMap, jobCalls map[string][]grant) {
	granted := map[string]map[string]bool{}
	for _, r := range res.Resources() {
		kind := r.GetKind()
		if kind != "RoleBinding" && kind != "ClusterRoleBinding" {
			continue
		}
		ref := field[map[string]any](t, r, "roleRef")
		role := find(res, ref["kind"].(string), ref["name"].(string))
		if role == nil {
			t.Errorf("%s/%s binds %v, which deploy/ does not have", kind, r.GetName(), ref)
			continue
		}
		var keys []string
		for _, rule := range asSlice(field[any](t, role, "rules")) {
			rule := rule.(map[string]any)
			for _, u := range asSlice(rule["nonResourceURLs"]) {
				for _, v := range asSlice(rule["verbs"]) {
					if u == "*" || v == "*" {
						t.Errorf("%s/%s grants a wildcard: %v", role.GetKind(), role.GetName(), rule)
					}
					keys = append(keys, grant{role.GetNamespace(), "", "nonResourceURL " + u.(string), "", v.(string)}.expand()...)
				}
			}
			names := asSlice(rule["resourceNames"])
			if len(names) == 0 {
				names = []any{""}
			}
			for _, g := range asSlice(rule["apiGroups"]) {
				for _, res := range asSlice(rule["resources"]) {
					for _, n := range names {
						for _, v := range asSlice(rule["verbs"]) {
							if g == "*" || res == "*" || v == "*" {
								t.Errorf("%s/%s grants a wildcard: %v", role.GetKind(), role.GetName(), rule)
							}
							keys = append(keys, grant{role.GetNamespace(), g.(string), res.(string), n.(string), v.(string)}.expand()...)
						}
					}
				}
			}
		}
		for _, s := range asSlice(field[any](t, r, "subjects")) {
			s := s.(map[string]any)
			if s["kind"] != "ServiceAccount" || s["namespace"] != "devata" {
				t.Errorf("%s/%s binds %v: want only devata's ServiceAccounts", kind, r.GetName(), s)
				continue
			}
			sa := s["name"].(string)
			if granted[sa] == nil {
				granted[sa] = map[string]bool{}
			}
			for _, k := range keys {
				granted[sa][k] = true
			}
		}
	}
	for sa := range granted {
		if _, ok := jobCalls[sa]; !ok {
			t.Errorf("deploy/ grants rights to ServiceAccount %s, which no job runs as", sa)
		}
	}
	for _, sa := range slices.Sorted(maps.Keys(jobCalls)) {
		want := map[string]bool{}
		for _, g := range jobCalls[sa] {
			for _, k := range g.expand() {
				want[k] = true
			}
		}
		for _, k := range slices.Sorted(maps.Keys(granted[sa])) {
			if !want[k] {
				t.Errorf("%s may %s: no call of its job needs that", sa, k)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(want)) {
			if !granted[sa][k] {
				t.Errorf("%s may not %s: its job needs it", sa, k)
			}
		}
	}
}

// The workloads: each runs as its own account (Kubernetes and Talos), the
// Talos identity comes from the talos.dev ServiceAccount of its name with
// the role it needs, allowed by the control planes' kubernetesTalosAPIAccess
// in deploy's inventory; the backup gets no token and no bundle; the Lease
// reconcile campaigns for is the one lease.yaml creates.
func TestKustomizeLeastPrivilegeWorkloads(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { leastPrivilegeWorkloads(t, res) })
}

func leastPrivilegeWorkloads(t *testing.T, res resmap.ResMap) {
	jobs := []struct {
		kind, name, account, talosRole string
		token, bundle                  bool
		// backupAge: the identity that opens encrypted snapshots
		// (Secret devata-backup-age), for the proof of restore
		backupAge bool
	}{
		{"Deployment", "devata-reconcile", "devata-reconcile", "os:admin", true, true, false},
		// os:admin: the config check reads MachineConfig (Sensitive)
		{"CronJob", "devata-drift", "devata-drift", "os:admin", true, true, false},
		{"CronJob", "devata-etcd-backup", "devata-etcd-backup", "os:etcd:backup", false, false, true},
		// no Talos role: backup verify asks no machine anything
		{"CronJob", "devata-etcd-verify", "devata-etcd-verify", "", false, false, true},
	}
	var cp struct {
		Machine struct {
			Features struct {
				KubernetesTalosAPIAccess struct {
					Enabled                     bool     `json:"enabled"`
					AllowedRoles                []string `json:"allowedRoles"`
					AllowedKubernetesNamespaces []string `json:"allowedKubernetesNamespaces"`
				} `json:"kubernetesTalosAPIAccess"`
			} `json:"features"`
		} `json:"machine"`
	}
	data, err := os.ReadFile("inventory/controlplane.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, &cp); err != nil {
		t.Fatal(err)
	}
	access := cp.Machine.Features.KubernetesTalosAPIAccess
	if !access.Enabled || !slices.Contains(access.AllowedKubernetesNamespaces, "devata") {
		t.Errorf("inventory/controlplane.yaml: kubernetesTalosAPIAccess %+v must be enabled for namespace devata", access)
	}
	for _, j := range jobs {
		r := find(res, j.kind, j.name)
		if r == nil {
			t.Fatalf("deploy/ has no %s %s", j.kind, j.name)
		}
		prefix := "spec.template.spec"
		if j.kind == "CronJob" {
			prefix = "spec.jobTemplate.spec.template.spec"
		}
		pod := field[map[string]any](t, r, prefix)
		if pod["serviceAccountName"] != j.account {
			t.Errorf("%s %s runs as %v, want its own ServiceAccount %s", j.kind, j.name, pod["serviceAccountName"], j.account)
		}
		sa := findV1SA(res, j.account)
		if sa == nil {
			t.Errorf("deploy/ has no v1 ServiceAccount %s", j.account)
		} else {
			automount, _ := sa.GetFieldValue("automountServiceAccountToken")
			if podAutomount, ok := pod["automountServiceAccountToken"]; ok {
				automount = podAutomount
			}
			if (automount != false) != j.token {
				t.Errorf("%s %s: token mounted %v, want %v", j.kind, j.name, automount != false, j.token)
			}
		}
		// the Talos identity
		talosSA := findTalosSA(res, j.account)
		if j.talosRole == "" {
			if talosSA != nil {
				t.Errorf("deploy/ asks Talos for an identity for %s, whose job asks no machine anything", j.account)
			}
			c := asSlice(pod["containers"])[0].(map[string]any)
			for _, a := range asSlice(c["args"]) {
				if strings.HasPrefix(a.(string), "--talosconfig") {
					t.Errorf("%s %s passes %s: it needs no Talos identity", j.kind, j.name, a)
				}
			}
			for _, v := range asSlice(pod["volumes"]) {
				if s, ok := v.(map[string]any)["secret"].(map[string]any); ok && !(j.backupAge && s["secretName"] == "devata-backup-age") {
					t.Errorf("%s %s mounts the Secret volume %v: it needs none", j.kind, j.name, v)
				}
			}
			continue
		}
		if talosSA == nil {
			t.Errorf("deploy/ has no talos.dev ServiceAccount %s", j.account)
			continue
		}
		roles := asSlice(field[any](t, talosSA, "spec.roles"))
		if len(roles) != 1 || roles[0] != j.talosRole {
			t.Errorf("talos.dev ServiceAccount %s asks for roles %v, want [%s]", j.account, roles, j.talosRole)
		}
		if !slices.Contains(access.AllowedRoles, j.talosRole) {
			t.Errorf("%s's role %s is not in the control planes' kubernetesTalosAPIAccess.allowedRoles %v: Talos would refuse it", j.account, j.talosRole, access.AllowedRoles)
		}
		secrets := map[string]string{} // secretName → mountPath
		byVolume := map[string]string{}
		for _, v := range asSlice(pod["volumes"]) {
			v := v.(map[string]any)
			if s, ok := v["secret"].(map[string]any); ok {
				name := s["secretName"].(string)
				if strings.HasPrefix(name, "devata-secrets-") { // the generator's hash suffix
					name = "devata-secrets"
				}
				byVolume[v["name"].(string)] = name
			}
		}
		c := asSlice(pod["containers"])[0].(map[string]any)
		for _, m := range asSlice(c["volumeMounts"]) {
			m := m.(map[string]any)
			if s, ok := byVolume[m["name"].(string)]; ok {
				secrets[s] = m["mountPath"].(string)
			}
		}
		if secrets[j.account] != "/var/run/secrets/talos.dev" {
			t.Errorf("%s %s mounts Talos' Secret %s at %q, want /var/run/secrets/talos.dev (mounts: %v)", j.kind, j.name, j.account, secrets[j.account], secrets)
		}
		if !slices.Contains(asSlice(c["args"]), any("--talosconfig=/var/run/secrets/talos.dev/config")) {
			t.Errorf("%s %s: args %v do not read the talosconfig Talos writes (/var/run/secrets/talos.dev/config)", j.kind, j.name, c["args"])
		}
		for s := range secrets {
			switch {
			case s == j.account:
			case s == "devata-secrets" && j.bundle, s == "devata-age-identity" && j.bundle, s == "devata-backup-age" && j.backupAge:
			default:
				t.Errorf("%s %s mounts the Secret %s, which it does not need", j.kind, j.name, s)
			}
		}
		if _, ok := secrets["devata-secrets"]; ok != j.bundle {
			t.Errorf("%s %s mounts the secrets bundle: %v, want %v", j.kind, j.name, ok, j.bundle)
		}
	}

	// the Lease: lease.yaml creates the one reconcile campaigns for
	d := find(res, "Deployment", "devata-reconcile")
	args := asSlice(asSlice(field[any](t, d, "spec.template.spec.containers"))[0].(map[string]any)["args"])
	if !slices.Contains(args, any("--lease-name=devata-reconcile")) {
		t.Errorf("the Deployment campaigns with %v, want --lease-name=devata-reconcile (lease.yaml, rbac.yaml)", args)
	}
	if l := find(res, "Lease", "devata-reconcile"); l == nil || l.GetNamespace() != "devata" {
		t.Errorf("deploy/ does not create the Lease devata/devata-reconcile: no account may create it")
	}
}

// Exec is limited to the agent pods by an admission policy that every
// account allowed pods/exec is subject to.
func TestKustomizeExecPolicy(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { execPolicy(t, res) })
}

func execPolicy(t *testing.T, res resmap.ResMap) {
	p := find(res, "ValidatingAdmissionPolicy", "devata-exec-cilium-agents-only")
	b := find(res, "ValidatingAdmissionPolicyBinding", "devata-exec-cilium-agents-only")
	if p == nil || b == nil {
		t.Fatal("deploy/ lacks the ValidatingAdmissionPolicy devata-exec-cilium-agents-only or its binding")
	}
	if got := field[string](t, b, "spec.policyName"); got != p.GetName() {
		t.Errorf("binding names policy %q", got)
	}
	if got := asSlice(field[any](t, b, "spec.validationActions")); !slices.Contains(got, any("Deny")) {
		t.Errorf("binding's validationActions %v: want Deny", got)
	}
	if got := field[string](t, p, "spec.failurePolicy"); got != "Fail" {
		t.Errorf("failurePolicy %q: want Fail (an error in the policy must not let exec through)", got)
	}
	cond := ""
	for _, c := range asSlice(field[any](t, p, "spec.matchConditions")) {
		cond += c.(map[string]any)["expression"].(string)
	}
	for sa, calls := range jobCalls {
		for _, g := range calls {
			if g.resource == "pods/exec" && !strings.Contains(cond, "'system:serviceaccount:devata:"+sa+"'") {
				t.Errorf("%s may exec but the policy's matchConditions %q do not hold it", sa, cond)
			}
		}
	}
}

func findTalosSA(res resmap.ResMap, name string) *resource.Resource {
	for _, r := range res.Resources() {
		if r.GetKind() == "ServiceAccount" && r.GetApiVersion() == "talos.dev/v1alpha1" && r.GetName() == name {
			return r
		}
	}
	return nil
}

func findV1SA(res resmap.ResMap, name string) *resource.Resource {
	for _, r := range res.Resources() {
		if r.GetKind() == "ServiceAccount" && r.GetApiVersion() == "v1" && r.GetName() == name {
			return r
		}
	}
	return nil
}

// field reads a field of a built resource.
func field[T any](t *testing.T, r *resource.Resource, path string) T {
	t.Helper()
	v, err := r.GetFieldValue(path)
	if err != nil {
		t.Fatalf("%s/%s: %s: %v", r.GetKind(), r.GetName(), path, err)
	}
	out, ok := v.(T)
	if !ok {
		t.Fatalf("%s/%s: %s is %T", r.GetKind(), r.GetName(), path, v)
	}
	return out
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// The manifests' pointers into docs/ lead somewhere.
func TestManifestDocLinks(t *testing.T) {
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	components, err := filepath.Glob("components/*/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, components...)
	link := regexp.MustCompile(`docs/([a-z-]+\.md)#([a-z0-9-]+)`)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(data), -1) {
			n++
			if !slices.Contains(anchors(t, "../docs/"+m[1]), m[2]) {
				t.Errorf("%s links docs/%s#%s: no such section", f, m[1], m[2])
			}
		}
	}
	if n == 0 {
		t.Error("no manifest links into docs/: the glob or the pattern is wrong")
	}
}
