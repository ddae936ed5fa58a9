package sim

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"time"

	ciliumcrds "github.com/cilium/cilium/pkg/k8s/apis/cilium.io/client/crds/v2"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
)

// ciliumHelm is what `helm install cilium cilium/cilium --version 1.20.2`
// with kube-proxy replacement on KubePrism leaves that devata reads.
//
//go:embed manifests/cilium-helm.yaml
var ciliumHelm []byte

var installKinds = map[string]schema.GroupVersionResource{
	"CustomResourceDefinition": {Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"},
	"ServiceAccount":           {Version: "v1", Resource: "serviceaccounts"},
	"ConfigMap":                {Version: "v1", Resource: "configmaps"},
	"DaemonSet":                {Group: "apps", Version: "v1", Resource: "daemonsets"},
}

// InstallCilium creates, in the cluster cfg points at, the Kubernetes side
// of a Cilium 1.20 install with kube-proxy replacement: Cilium's own
// CiliumNodeConfig CRD (from the cilium module), and the agent's
// ServiceAccount, cilium-config ConfigMap and DaemonSet as its Helm chart
// renders them (manifests/cilium-helm.yaml). It waits until the CRD is
// served. Objects that exist are left as they are. The agents are the
// sim's: SyncKubelets runs one per node (see cilium_pods.go); nothing here
// runs a datapath.
func InstallCilium(ctx context.Context, cfg *rest.Config) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	crd, err := ciliumcrds.EmbedFS.ReadFile("ciliumnodeconfigs.yaml")
	if err != nil {
		return fmt.Errorf("cilium's CiliumNodeConfig CRD: %w", err)
	}

	for _, doc := range [][]byte{crd, ciliumHelm} {
		objs, err := decodeObjects(doc)
		if err != nil {
			return err
		}

		for _, u := range objs {
			gvr, ok := installKinds[u.GetKind()]
			if !ok {
				return fmt.Errorf("install cilium: no resource for kind %s", u.GetKind())
			}

			var ri dynamic.ResourceInterface = dyn.Resource(gvr)
			if ns := u.GetNamespace(); ns != "" {
				ri = dyn.Resource(gvr).Namespace(ns)
			}

			if _, err := ri.Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("install cilium: create %s %s: %w", u.GetKind(), u.GetName(), err)
			}
		}
	}

	// A new CRD takes a moment to be served.
	cnc := dyn.Resource(ciliumNodeConfigs)
	deadline := time.Now().Add(30 * time.Second)

	for {
		_, err := cnc.List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			return nil
		}

		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("install cilium: CiliumNodeConfigs not served after 30s: %w", err)
		}

		time.Sleep(100 * time.Millisecond)
	}
}

func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)

	var out []*unstructured.Unstructured

	for {
		u := &unstructured.Unstructured{}

		err := dec.Decode(&u.Object)
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return nil, fmt.Errorf("decode manifest: %w", err)
		}

		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
