// Package netcheck owns the Cilium kube-proxy-free evidence of a node: whether
// the active Talos config, Talos' own resources and the cluster's Cilium
// objects declare kube-proxy replacement for it, and whether kube-proxy is
// really gone. It reads; it never renders configs (bootstrap), dials Talos
// (callers) nor changes anything in the cluster.
package netcheck

import (
	"context"
	"fmt"
	"sync"

	"github.com/cosi-project/runtime/pkg/resource"
	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/k8s"

	"devata.dev/devata/talosapi"
)

// Observation is what one pass read from one node over the Talos API. Each
// fact carries its own error, so that one failed read makes only the findings
// that need it Unknown.
type Observation struct {
	// Err is set when the machine could not be reached at all (by a caller
	// that could not dial it, or found it in maintenance mode).
	Err error

	// Manifests are the bootstrap manifests Talos applied (ManifestStatus
	// "manifests"); ManifestsFound is false on nodes that apply none (workers,
	// control planes before etcd has data).
	Manifests      []string
	ManifestsFound bool
	ManifestsErr   error

	// KubePrism is the KubePrismStatuses resource; KubePrismFound is false when
	// Talos runs no KubePrism on the node.
	KubePrism      KubePrism
	KubePrismFound bool
	KubePrismErr   error
}

// KubePrism is Talos' view of its local API server load balancer.
type KubePrism struct {
	Host    string // "localhost:7445"
	Healthy bool
}

// Observe reads the node's manifest and KubePrism status over one client
// whose endpoint is the node, both reads in flight together. It never returns
// an error: failures are in the Observation. Both reads work with os:reader.
func Observe(ctx context.Context, c *client.Client) *Observation {
	o := &Observation{}
	var wg sync.WaitGroup
	wg.Go(func() {
		list, err := safe.StateList[*k8s.ManifestStatus](ctx, c.COSI, resource.NewMetadata(k8s.ControlPlaneNamespaceName, k8s.ManifestStatusType, "", resource.VersionUndefined))
		if err != nil {
			o.ManifestsErr = fmt.Errorf("list ManifestStatus: %w", talosapi.PlainError(err))
			return
		}
		for r := range list.All() {
			o.ManifestsFound = true
			o.Manifests = append(o.Manifests, r.TypedSpec().ManifestsApplied...)
		}
	})
	wg.Go(func() {
		list, err := safe.StateList[*k8s.KubePrismStatuses](ctx, c.COSI, resource.NewMetadata(k8s.NamespaceName, k8s.KubePrismStatusesType, "", resource.VersionUndefined))
		if err != nil {
			o.KubePrismErr = fmt.Errorf("list KubePrismStatuses: %w", talosapi.PlainError(err))
			return
		}
		for r := range list.All() {
			o.KubePrismFound = true
			o.KubePrism = KubePrism{Host: r.TypedSpec().Host, Healthy: r.TypedSpec().Healthy}
		}
	})
	wg.Wait()
	return o
}
