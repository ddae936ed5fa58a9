package certcheck_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"
	"k8s.io/client-go/rest"

	"devata.dev/devata/certcheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
)

// The kubeconfig's client certificate and the serving certificate of a
// real kube-apiserver are read (the latter by a TLS handshake verified
// against the kubeconfig's CA): Drifted with the kubeconfig's renewal
// once the threshold is past its end, InSync before; a server whose
// certificate another CA signed is Unknown, never read as the cluster's.
func TestKubeconfigAndAPIServerCertificates(t *testing.T) {
	env := testenv.Start(t)
	f := simtest.Start(t, simtest.Options{LoopbackNet: "127.77.37"})
	d := talosconfigValidFor(t, f, 365*24*time.Hour, role.Admin)
	b, _ := pem.Decode(env.Config.CertData)
	if b == nil {
		t.Fatal("the test bed's kubeconfig has no client certificate")
	}
	client, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	left := time.Until(client.NotAfter)
	cp := f.Inventory.ControlPlanes()[0].Name

	inside := pass(t, f, d, certcheck.Options{Kube: env.Config, Threshold: left + 48*time.Hour})
	k := of(inside, cp, certcheck.CredKubeconfig)
	if len(k) != 1 || k[0].Status != drift.StatusDrifted || !k[0].Certificate.NotAfter.Equal(client.NotAfter.UTC()) || !strings.Contains(k[0].Next, "kubeconfig --force") {
		t.Errorf("kubeconfig with the threshold past its end: %+v, want Drifted with its notAfter and the renewal", k)
	}
	a := of(inside, cp, certcheck.CredKubeAPIServer)
	if len(a) != 1 || a[0].Certificate == nil || a[0].Status == drift.StatusUnknown {
		t.Errorf("kube-apiserver: %+v, want its serving certificate read", a)
	}
	outside := pass(t, f, d, certcheck.Options{Kube: env.Config, Threshold: 24 * time.Hour})
	if k := of(outside, cp, certcheck.CredKubeconfig); len(k) != 1 || k[0].Status != drift.StatusInSync {
		t.Errorf("kubeconfig with %s left and a one-day threshold: %+v, want InSync", left.Round(time.Hour), k)
	}

	stranger := rest.CopyConfig(env.Config)
	stranger.CAData = f.Bundle.Certs.OS.Crt // not the API server's CA
	rep := pass(t, f, d, certcheck.Options{Kube: stranger})
	var found bool
	for _, r := range rep.Results {
		if r.Machine == cp && strings.Contains(r.Reason, "API server's serving certificate") {
			found = true
			if r.Status != drift.StatusUnknown || !strings.Contains(r.Reason, "not the kubeconfig's CA's") {
				t.Errorf("a serving certificate of another CA: %s %q, want Unknown naming the CA", r.Status, r.Reason)
			}
		}
	}
	if !found {
		t.Errorf("no API server result: %+v", rep.Results)
	}
}
