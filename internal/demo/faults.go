package demo

import (
	"bytes"
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"devata.dev/devata/internal/simfleet"
	"devata.dev/devata/netcheck"
)

// cncOverride is a CiliumNodeConfig the demo creates and removes; nil
// without Kubernetes.
type cncOverride struct {
	res dynamic.ResourceInterface
	obj *unstructured.Unstructured
}

// kprOverride is the CiliumNodeConfig that turns kube-proxy replacement off
// on one node, as one left from debugging would.
func kprOverride(k *simfleet.Kubernetes, node string) (*cncOverride, error) {
	if k == nil {
		return nil, nil
	}
	dyn, err := dynamic.NewForConfig(k.Config)
	if err != nil {
		return nil, err
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "cilium.io/v2", "kind": "CiliumNodeConfig",
		"metadata": map[string]any{"name": "debug-kpr-off-" + node, "namespace": "kube-system"},
		"spec": map[string]any{
			"nodeSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/hostname": node}},
			"defaults":     map[string]any{"kube-proxy-replacement": "false"},
		},
	}}
	return &cncOverride{res: dyn.Resource(netcheck.CiliumNodeConfigs).Namespace("kube-system"), obj: obj}, nil
}

func (c *cncOverride) create(ctx context.Context) error {
	if c == nil {
		return nil
	}
	_, err := c.res.Create(ctx, c.obj, metav1.CreateOptions{})
	return err
}

func (c *cncOverride) remove(ctx context.Context) error {
	if c == nil {
		return nil
	}
	return c.res.Delete(ctx, c.obj.GetName(), metav1.DeleteOptions{})
}

// editConfig is cfg with its first old replaced by new, as an edit made
// behind devata's back would be.
func editConfig(cfg []byte, old, new string) ([]byte, error) {
	if !bytes.Contains(cfg, []byte(old)) {
		return nil, fmt.Errorf("%q not in config", old)
	}
	return bytes.Replace(cfg, []byte(old), []byte(new), 1), nil
}
