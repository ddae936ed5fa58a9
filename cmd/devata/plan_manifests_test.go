package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
)

// devata plan shows what syncing the bootstrap manifests after a
// Kubernetes upgrade would change, as apply --dry-run does (issue 36): a
// server-side dry run against the real API server, by object and image
// only. The fleet's CoreDNS was left at an older image (Talos creates its
// manifests at boot and never updates them); plan names the Deployment and
// the image change in text and JSON, never an object's contents, and
// CoreDNS still runs the old image afterwards.
func TestPlanShowsTheManifestsDryRun(t *testing.T) {
	sf, k, kubeconfig := startOnKubernetes(t, "v1.33.5")
	ctx := t.Context()
	deps := k.kc.AppsV1().Deployments("kube-system")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := deps.Get(ctx, "coredns", metav1.GetOptions{}); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("no CoreDNS Deployment from Talos' boot-time apply: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	const oldDNS = "registry.k8s.io/coredns/coredns:v1.11.1"
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		dep, err := deps.Get(ctx, "coredns", metav1.GetOptions{})
		if err != nil {
			return err
		}
		dep.Spec.Template.Spec.Containers[0].Image = oldDNS
		_, err = deps.Update(ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"})
		return err
	}); err != nil {
		t.Fatal(err)
	}

	cfg := []string{"--config", sf.settings, kubeconfig}
	r := devata(t, nil, append([]string{"plan"}, cfg...)...)
	show(t, r)
	if r.code != 1 {
		t.Fatalf("plan: exit %d, want 1 (pending)\n%s%s", r.code, r.stdout, r.err)
	}
	want := "would be configured apps/v1 Deployment kube-system/coredns (coredns: " + oldDNS + " → registry.k8s.io/coredns/coredns:v1.12.2)"
	lacks(t, "plan", r.stdout,
		"     after the last step, the bootstrap manifests (CoreDNS, kube-proxy, …) server-side applied, as talosctl upgrade-k8s does; a dry run now:",
		"        "+want,
		"objects of cp-1's manifests unchanged",
	)
	for _, content := range []string{"Corefile", "forward .", "kubernetes cluster.local"} {
		if strings.Contains(r.stdout, content) {
			t.Errorf("plan quotes a manifest's contents (%q)", content)
		}
	}

	r = devata(t, nil, append([]string{"plan", "-o", "json"}, cfg...)...)
	var doc struct {
		Kubernetes struct{ Manifests []string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("plan -o json: %v\n%s", err, r.stdout)
	}
	if len(doc.Kubernetes.Manifests) < 2 || doc.Kubernetes.Manifests[0] != want {
		t.Errorf("kubernetes.manifests = %q, want %q first, then the unchanged count", doc.Kubernetes.Manifests, want)
	}

	dep, err := deps.Get(ctx, "coredns", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := dep.Spec.Template.Spec.Containers[0].Image; got != oldDNS {
		t.Errorf("plan changed CoreDNS to %s", got)
	}
	if applies, _ := writes(sf.Sim); applies != 0 {
		t.Errorf("plan applied %d configs", applies)
	}
}
