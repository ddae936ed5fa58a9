package simfleet

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// Kubernetes is a real kube-apiserver (envtest) shaped as the cluster's,
// where the simulated kubelets register their Nodes.
type Kubernetes struct {
	// Config authenticates as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file holding Config.
	Kubeconfig string
	Client     kubernetes.Interface
	stop       func() error
}

// StartKubernetes starts the API server for the inventory's cluster,
// building kube-apiserver and etcd first if they are not in the cache yet
// (progress is written there).
func StartKubernetes(ctx context.Context, progress io.Writer, inv *inventory.Inventory, bundle *secrets.Bundle) (*Kubernetes, error) {
	env, stop, err := testenv.RunWith(ctx, progress, apiServer(inv, bundle))
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		stop() //nolint:errcheck // the client's error is the one to report
		return nil, err
	}
	return &Kubernetes{Config: env.Config, Kubeconfig: env.Kubeconfig, Client: kc, stop: stop}, nil
}

// Host is the API server's host:port.
func (k *Kubernetes) Host() string {
	if u, err := url.Parse(k.Config.Host); err == nil && u.Host != "" {
		return u.Host
	}
	return k.Config.Host
}

// Stop stops the API server and its etcd.
func (k *Kubernetes) Stop() error { return k.stop() }

// apiServer shapes the sim's kube-apiserver as a Talos control
// plane's: serving and client certificates from the bundle's Kubernetes
// CA, the cluster endpoint's host in its serving certificate, and the
// inventory's service subnets as its service range, so that the kube-dns
// Service gets the address Talos pins it to (sim/manifests.go) and a
// later manifest sync (talosctl upgrade-k8s, devata after a Kubernetes
// upgrade) finds the ClusterIP it applies.
func apiServer(inv *inventory.Inventory, bundle *secrets.Bundle) testenv.Options {
	opts := testenv.Options{ClusterCA: bundle.Certs.K8s, ServiceSubnets: inv.Cluster.Network.ServiceSubnets}
	if u, err := url.Parse(inv.Cluster.Endpoint); err == nil && u.Hostname() != "" {
		opts.ServingHosts = []string{u.Hostname()}
	}
	return opts
}

// WaitNodesReady waits until n Nodes are Ready, as an operator would with
// kubectl wait --for=condition=Ready nodes --all.
func WaitNodesReady(ctx context.Context, kc kubernetes.Interface, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		nodes := talosapi.ObserveNodes(ctx, kc)
		ready := 0
		for _, f := range nodes.ByName {
			if f.Ready {
				ready++
			}
		}
		if ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d Nodes Ready after %s (%v)", ready, n, timeout, nodes.Err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
