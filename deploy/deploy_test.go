// Package deploy holds the manifests that run devata in the cluster it
// manages; this test builds them as `kubectl apply -k deploy/` would.
package deploy_test

import (
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Every object lands in the devata namespace except the netcheck exec Role
// and its binding, which must stay in the Cilium namespace to grant exec
// into the agent pods; the binding's subject stays devata's ServiceAccount.
func TestKustomizeNamespaces(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
	seen := map[string]bool{}
	for _, r := range res.Resources() {
		kind, name, ns := r.GetKind(), r.GetName(), r.GetNamespace()
		seen[kind+"/"+name] = true
		switch {
		case kind == "Namespace", kind == "ClusterRole", kind == "ClusterRoleBinding":
			if ns != "" {
				t.Errorf("%s/%s has namespace %q", kind, name, ns)
			}
		case name == "devata-netcheck-exec":
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
				if s, _ := s.(map[string]any); s["namespace"] != "devata" || s["name"] != "devata" {
					t.Errorf("%s/%s binds %v, want ServiceAccount devata/devata", kind, name, s)
				}
			}
		}
	}
	for _, want := range []string{"Role/devata-netcheck-exec", "RoleBinding/devata-netcheck-exec", "ClusterRole/devata-netcheck", "Deployment/devata-reconcile", "CronJob/devata-etcd-backup", "PersistentVolumeClaim/devata-etcd-backups"} {
		if !seen[want] {
			t.Errorf("build lacks %s; has %v", want, seen)
		}
	}
}

// Every container runs the image the images: entry names (docs/image.md):
// none is left with the bare name `devata`, which no registry serves.
func TestKustomizeImage(t *testing.T) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), ".")
	if err != nil {
		t.Fatalf("kustomize build deploy/: %v", err)
	}
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
