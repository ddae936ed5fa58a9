// Package deploy holds the manifests that run devata in the cluster it
// manages; this test builds them as `kubectl apply -k deploy/` would.
package deploy_test

import (
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/resmap"
)

// Every object lands in the devata namespace except the netcheck exec Role
// and its binding, which must stay in the Cilium namespace to grant exec
// into the agent pods; the binding's subject stays devata's ServiceAccount.
func TestKustomizeNamespaces(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { kustomizeNamespaces(t, res) })
}

func kustomizeNamespaces(t *testing.T, res resmap.ResMap) {
	seen := map[string]bool{}
	for _, r := range res.Resources() {
		kind, name, ns := r.GetKind(), r.GetName(), r.GetNamespace()
		seen[kind+"/"+name] = true
		switch {
		case kind == "Namespace", kind == "ClusterRole", kind == "ClusterRoleBinding",
			kind == "ValidatingAdmissionPolicy", kind == "ValidatingAdmissionPolicyBinding":
			if ns != "" {
				t.Errorf("%s/%s has namespace %q", kind, name, ns)
			}
		case name == "devata-netcheck-exec", strings.HasPrefix(name, "devata-kubernetes-upgrade") && (kind == "Role" || kind == "RoleBinding"):
			if ns != "kube-system" {
				t.Errorf("%s/%s in namespace %q, want kube-system", kind, name, ns)
			}
		default:
			if ns != "devata" {
				t.Errorf("%s/%s in namespace %q, want devata", kind, name, ns)
			}
		}
		if kind == "RoleBinding" || kind == "ClusterRoleBinding" {
			subjects, _ := r.GetFieldValue("subjects")
			for _, s := range subjects.([]any) {
				if s, _ := s.(map[string]any); s["namespace"] != "devata" || !strings.HasPrefix(s["name"].(string), "devata-") {
					t.Errorf("%s/%s binds %v, want one of devata's ServiceAccounts in namespace devata", kind, name, s)
				}
			}
		}
	}
	for _, want := range []string{"Role/devata-netcheck-exec", "RoleBinding/devata-netcheck-exec", "ClusterRole/devata-netcheck", "Deployment/devata-reconcile", "CronJob/devata-etcd-backup", "CronJob/devata-etcd-verify"} {
		if !seen[want] {
			t.Errorf("build lacks %s; has %v", want, seen)
		}
	}
}

// Every container runs the image the images: entry names (docs/image.md):
// none is left with the bare name `devata`, which no registry serves.
func TestKustomizeImage(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { kustomizeImage(t, res) })
}

func kustomizeImage(t *testing.T, res resmap.ResMap) {
	const want = "ghcr.io/devata/devata:latest"
	n := 0
	for _, r := range res.Resources() {
		for _, path := range []string{"spec.template.spec.containers", "spec.jobTemplate.spec.template.spec.containers"} {
			cs, err := r.GetFieldValue(path)
			if err != nil {
				continue
			}
			for _, c := range cs.([]any) {
				c, _ := c.(map[string]any)
				n++
				if c["image"] != want {
					t.Errorf("%s/%s container %v runs %v, want %s (the images: entry in kustomization.yaml)", r.GetKind(), r.GetName(), c["name"], c["image"], want)
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("found %d containers, want the Deployment's and both CronJobs'", n)
	}
}

// The containers that load the secrets bundle (reconcile and drift) can
// open an encrypted one: each mounts the optional Secret
// devata-age-identity read-only and points DEVATA_AGE_IDENTITY at a file
// inside that mount; a cluster without the Secret still starts them. The
// etcd backup reads no bundle and gets no key.
func TestKustomizeAgeIdentity(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { kustomizeAgeIdentity(t, res) })
}

func kustomizeAgeIdentity(t *testing.T, res resmap.ResMap) {
	want := map[string]bool{"Deployment/devata-reconcile": true, "CronJob/devata-drift": true, "CronJob/devata-etcd-backup": false, "CronJob/devata-etcd-verify": false}
	for _, r := range res.Resources() {
		id := r.GetKind() + "/" + r.GetName()
		mounts, ok := want[id]
		if !ok {
			continue
		}
		delete(want, id)
		prefix := "spec.template.spec."
		if r.GetKind() == "CronJob" {
			prefix = "spec.jobTemplate.spec.template.spec."
		}
		volume := ""
		if vs, err := r.GetFieldValue(prefix + "volumes"); err == nil {
			for _, v := range vs.([]any) {
				v, _ := v.(map[string]any)
				sec, _ := v["secret"].(map[string]any)
				if sec["secretName"] != "devata-age-identity" {
					continue
				}
				volume, _ = v["name"].(string)
				if sec["optional"] != true {
					t.Errorf("%s: the Secret devata-age-identity is not optional: a cluster without an encrypted bundle could not start it", id)
				}
				if mode, _ := sec["defaultMode"].(int); mode != 0o400 {
					t.Errorf("%s: devata-age-identity's defaultMode %v, want 0400", id, sec["defaultMode"])
				}
			}
		}
		if !mounts {
			if volume != "" {
				t.Errorf("%s reads no secrets bundle but mounts devata-age-identity", id)
			}
			continue
		}
		if volume == "" {
			t.Errorf("%s has no volume of the Secret devata-age-identity", id)
			continue
		}
		cs, err := r.GetFieldValue(prefix + "containers")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cs.([]any) {
			c, _ := c.(map[string]any)
			mountPath, env := "", ""
			ms, _ := c["volumeMounts"].([]any)
			for _, m := range ms {
				m, _ := m.(map[string]any)
				if m["name"] == volume {
					mountPath, _ = m["mountPath"].(string)
					if m["readOnly"] != true {
						t.Errorf("%s: %s mounts %s writable", id, c["name"], volume)
					}
				}
			}
			es, _ := c["env"].([]any)
			for _, e := range es {
				e, _ := e.(map[string]any)
				if e["name"] == "DEVATA_AGE_IDENTITY" {
					env, _ = e["value"].(string)
				}
			}
			if mountPath == "" || env == "" || !strings.HasPrefix(env, mountPath+"/") {
				t.Errorf("%s: %s has DEVATA_AGE_IDENTITY %q and mounts %s at %q: the setting must name a file in the mount", id, c["name"], env, volume, mountPath)
			}
		}
	}
	for id := range want {
		t.Errorf("build lacks %s", id)
	}
}

// A Secret or ConfigMap volume is written by the kubelet as root, with its
// defaultMode; only fsGroup makes the kubelet hand the files to the pod's
// group (and add the group's read bit). So a non-root pod that mounts one
// with a mode others cannot read (0400) must set fsGroup to its group, or
// devata cannot read its talosconfig or identity (the reconcile Deployment
// had none).
func TestKustomizeMountedFilesAreReadable(t *testing.T) {
	forEachBuild(t, func(t *testing.T, _ string, res resmap.ResMap) { kustomizeMountedFilesAreReadable(t, res) })
}

func kustomizeMountedFilesAreReadable(t *testing.T, res resmap.ResMap) {
	pods := 0
	for _, r := range res.Resources() {
		id := r.GetKind() + "/" + r.GetName()
		var spec map[string]any
		for _, path := range []string{"spec.template.spec", "spec.jobTemplate.spec.template.spec"} {
			if v, err := r.GetFieldValue(path); err == nil {
				spec, _ = v.(map[string]any)
			}
		}
		if spec == nil {
			continue
		}
		pods++
		sc, _ := spec["securityContext"].(map[string]any)
		if sc["runAsNonRoot"] != true {
			continue
		}
		vs, _ := spec["volumes"].([]any)
		for _, v := range vs {
			v, _ := v.(map[string]any)
			for _, kind := range []string{"secret", "configMap"} {
				src, ok := v[kind].(map[string]any)
				if !ok {
					continue
				}
				mode := 0o644 // the API's default
				if m, ok := src["defaultMode"].(int); ok {
					mode = m
				}
				if mode&0o004 != 0 {
					continue
				}
				if sc["fsGroup"] == nil || sc["fsGroup"] != sc["runAsGroup"] {
					t.Errorf("%s mounts %s %v with mode %#o as user %v group %v and fsGroup %v: the files stay root's and the container cannot read them; set fsGroup to its group", id, kind, v["name"], mode, sc["runAsUser"], sc["runAsGroup"], sc["fsGroup"])
				}
			}
		}
	}
	if pods < 3 {
		t.Errorf("found %d pod templates, want the Deployment's and both CronJobs'", pods)
	}
}
