package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
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

// addCertDaysFlag adds --cert-days, the certificates check's threshold, to
// a command that runs the check (drift, reconcile), with one default and
// one usage text.
func addCertDaysFlag(cmd *cobra.Command, days *int) {
	cmd.Flags().IntVar(days, "cert-days", int(certcheck.DefaultThreshold.Hours()/24), "certificates: a talosconfig, kubeconfig or API server certificate with fewer days left than this is Drifted")
}

// checkCertDays refuses a --cert-days below one day.
func checkCertDays(days int) error {
	if days < 1 {
		return usageError(fmt.Errorf("--cert-days %d: give the days left (1 or more) below which a certificate is Drifted", days))
	}
	return nil
}

// certThreshold is --cert-days as the check's threshold.
func certThreshold(days int) time.Duration { return time.Duration(days) * 24 * time.Hour }
