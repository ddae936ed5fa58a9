package plan

import (
	"strings"
	"testing"
)

// TestWriteKubernetesFoldsTheSameStep: steps that differ only in their
// machine are one row naming the machines; a step that differs is its
// own row, and each component says what the rollout waits for.
func TestWriteKubernetesFoldsTheSameStep(t *testing.T) {
	pull := func(m, what string) Step {
		return Step{Kind: "kubernetes-image-pull", Machine: m, Status: StatusPending, By: "apply", Summary: "pull " + what, Reason: "first"}
	}
	k := &KubernetesChange{From: "v1.36.3", To: "v1.37.0", Next: "kube-apiserver on cp-1",
		Before: []Step{pull("cp-1", "kube-apiserver"), pull("cp-2", "kube-apiserver"), pull("w-1", "kubelet"), pull("w-2", "kubelet")},
		Steps:  []KubernetesStep{{Component: "kube-apiserver", Machines: []string{"cp-1", "cp-2"}}, {Component: "kubelet", Machines: []string{"cp-1", "w-1"}}, {Component: "kube-scheduler", Held: "why"}}}
	var b strings.Builder
	if err := WriteKubernetes(&b, k); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"kubernetes-image-pull cp-1, cp-2 pull kube-apiserver",
		"kubernetes-image-pull w-1, w-2 pull kubelet",
		"1. kube-apiserver on cp-1, cp-2, one at a time; after each, its static pod Ready on the new image and etcd healthy\n",
		"2. kubelet on cp-1, w-1; after each, its Node Ready on kubelet v1.37.0\n",
		"3. kube-scheduler: held: why\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "kubernetes-image-pull"); n != 2 {
		t.Errorf("%d image-pull rows, want 2:\n%s", n, out)
	}
	if k.Before[0].Machine != "cp-1" {
		t.Errorf("folding changed the caller's step: %q", k.Before[0].Machine)
	}
}
