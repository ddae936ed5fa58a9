package main

import (
	"k8s.io/client-go/rest"

	"devata.dev/devata/certcheck"
	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

// certOptions is what the certificates check reads for a pass over inv
// through d: the talosconfig context's certificate (d's), and the
// kubeconfig a session uses (or the pod's service account). A kubeconfig
// that does not load leaves its findings Unknown, as the session's own
// clients then say why.
func (a *app) certOptions(inv *inventory.Inventory, d *talosapi.Dialer) certcheck.Options {
	o := certcheck.Options{Dialer: d}
	kubeconfig := a.settings.Kubeconfig
	if inv != nil && kubeconfig == "" {
		kubeconfig = a.kubeconfigFor(inv)
	}
	if kubeconfig != "" {
		if cfg, err := talosapi.KubeConfig(kubeconfig); err == nil {
			o.Kube = cfg
		}
	} else if cfg, err := rest.InClusterConfig(); err == nil {
		o.Kube = cfg
	}
	return o
}
