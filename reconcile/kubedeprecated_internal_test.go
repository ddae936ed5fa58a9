package reconcile

import (
	"context"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// The deprecated-API check reads what the real API server records: a
// kube-apiserver v1.37.2 serving resource.k8s.io/v1beta1 (off by default,
// k8s.io/kubernetes pkg/controlplane/instance.go
// betaAPIGroupVersionsDisabledByDefault; its types say deprecated in 1.35,
// removed in 1.38: k8s.io/api resource/v1beta1
// zz_generated.prerelease-lifecycle.go) records a list of its deviceclasses
// in apiserver_requested_deprecated_apis with removed_release "1.38". An
// upgrade to v1.38.0 is then refused, naming group/version resource and
// release; one to v1.37.x is not (the API stays). Before anyone asked, the
// metric holds no such line. A caller that may not read /metrics is refused
// too (fail closed), with what to grant.
func TestDeprecatedAPIsFromTheAPIServersMetric(t *testing.T) {
	env, kc := StartTestKube(t, map[string]string{"runtime-config": "resource.k8s.io/v1beta1=true"})
	ctx := context.Background()
	deviceClasses := DeprecatedAPI{Group: "resource.k8s.io", Version: "v1beta1", Resource: "deviceclasses", RemovedRelease: "1.38"}

	before, err := RequestedDeprecatedAPIs(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(before, deviceClasses) {
		t.Fatalf("deviceclasses recorded before any request: %v", before)
	}
	if why := deprecatedRefusal(ctx, kc, "v1.38.0"); why != "" {
		t.Fatalf("refused before any deprecated request: %s", why)
	}

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1beta1", Resource: "deviceclasses"}
	if _, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatalf("list %s: %v", gvr, err)
	}

	all, err := RequestedDeprecatedAPIs(ctx, kc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(all, deviceClasses) {
		t.Fatalf("the API server's metric does not record the list of deviceclasses: %v", all)
	}
	removed, err := DeprecatedAPIsRemovedBy(ctx, kc, "v1.38.0")
	if err != nil || !slices.Contains(removed, deviceClasses) {
		t.Fatalf("removed by v1.38.0: %v, %v; want deviceclasses", removed, err)
	}
	why := deprecatedRefusal(ctx, kc, "v1.38.0")
	for _, want := range []string{"Kubernetes v1.38.0 removes", "resource.k8s.io/v1beta1 deviceclasses (removed in 1.38)", "--force (devata apply or reconcile)"} {
		if !strings.Contains(why, want) {
			t.Errorf("refusal %q lacks %q", why, want)
		}
	}
	if why := deprecatedRefusal(ctx, kc, "v1.37.2"); why != "" {
		t.Errorf("v1.37.2 keeps resource.k8s.io/v1beta1, yet refused: %s", why)
	}

	nobody, err := env.User("nobody")
	if err != nil {
		t.Fatal(err)
	}
	kn, err := kubernetes.NewForConfig(nobody)
	if err != nil {
		t.Fatal(err)
	}
	if why := deprecatedRefusal(ctx, kn, "v1.38.0"); !strings.Contains(why, "could not be read") || !strings.Contains(why, "/metrics") {
		t.Errorf("a caller who may not read /metrics: %q; want a refusal naming /metrics", why)
	}
}

func TestDeprecatedAPIRemovedBy(t *testing.T) {
	for _, tc := range []struct {
		removed, to string
		want        bool
	}{
		{"1.38", "v1.38.0", true},
		{"1.38", "v1.39.1", true},
		{"1.38", "v1.37.9", false},
		{"1.38", "v2.0.0", true},
		{"", "v1.99.0", false}, // a CRD version: no release named
		{"x", "v1.38.0", false},
	} {
		if got := (DeprecatedAPI{RemovedRelease: tc.removed}).RemovedBy(tc.to); got != tc.want {
			t.Errorf("removed in %q, to %s: %v, want %v", tc.removed, tc.to, got, tc.want)
		}
	}
}
