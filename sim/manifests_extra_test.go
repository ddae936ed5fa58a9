package sim_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// A control plane downloads cluster.extraManifests with
// cluster.extraManifestHeaders, as ExtraManifestController does
// (extra_manifest.go processURL): each body becomes the Manifest
// "99-<URL>"; a URL that answers 404 serves no Manifest and the others
// are served all the same. Talos' boot-time apply then creates its
// objects, the Namespace before the Deployment listed ahead of it.
func TestExtraManifestsAreDownloaded(t *testing.T) {
	const approver = `apiVersion: apps/v1
kind: Deployment
metadata:
  name: approver
  namespace: approver
spec:
  selector:
    matchLabels: {app: approver}
  template:
    metadata:
      labels: {app: approver}
    spec:
      containers:
        - name: approver
          image: ghcr.io/alex1989hu/kubelet-serving-cert-approver:0.10.0
---
apiVersion: v1
kind: Namespace
metadata:
  name: approver
`
	var withHeader, without atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/approver.yaml" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			without.Add(1)
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		withHeader.Add(1)
		_, _ = w.Write([]byte(approver))
	}))
	t.Cleanup(srv.Close)
	ok, missing := srv.URL+"/approver.yaml", srv.URL+"/missing.yaml"

	env := testenv.StartWith(t, testenv.Options{ServiceSubnets: []string{"10.96.0.0/12"}})
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: patch(t, cp, `cluster:
  extraManifests:
    - `+ok+`
    - `+missing+`
  extraManifestHeaders:
    Authorization: Bearer s3cret
`)})
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	joined(t, f, 1)

	c := admin(t, f.Machine("cp-1").Addr())
	var ms map[string][]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		ms = map[string][]string{}
		for id, objs := range manifestItems(t, c) {
			ms[id] = objectNames(objs)
		}
		if _, ok := ms["99-"+ok]; ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Manifest 99-%s 10s after boot; manifests %v", ok, slices.Sorted(func(yield func(string) bool) {
				for id := range ms {
					if !yield(id) {
						return
					}
				}
			}))
		}
	}
	if got := ms["99-"+ok]; !slices.Equal(got, []string{"Deployment approver/approver", "Namespace approver"}) {
		t.Errorf("99-%s holds %q", ok, got)
	}
	if _, ok := ms["99-"+missing]; ok {
		t.Errorf("a URL that answers 404 is served as a Manifest")
	}
	if withHeader.Load() == 0 || without.Load() != 0 {
		t.Errorf("downloads with the header: %d, without: %d; want every one with it", withHeader.Load(), without.Load())
	}

	// the boot-time apply creates both, the Namespace first
	if errs := f.SyncKubelets(t.Context(), kc); len(errs) > 0 {
		t.Fatalf("kubelets: %v", errs)
	}
	if _, err := kc.AppsV1().Deployments("approver").Get(t.Context(), "approver", metav1.GetOptions{}); err != nil {
		t.Errorf("the extra manifest's Deployment: %v", err)
	}

	// downloaded once per boot: nothing fetches it again
	n := withHeader.Load()
	for range 3 {
		f.Machine("cp-1").Observe()
		manifestItems(t, c)
	}
	if withHeader.Load() != n {
		t.Errorf("downloaded again without a new boot or config: %d downloads, then %d", n, withHeader.Load())
	}
}
