package testenv_test

import (
	stdx509 "crypto/x509"
	"strings"
	"testing"

	"github.com/siderolabs/crypto/x509"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"devata.dev/devata/internal/testenv"
)

func newCA(t *testing.T) (*x509.CertificateAuthority, *x509.PEMEncodedCertificateAndKey) {
	t.Helper()
	ca, err := x509.NewSelfSignedCertificateAuthority(x509.ECDSA(true), x509.Organization("kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	return ca, x509.NewCertificateAndKeyFromCertificateAuthority(ca)
}

func clientFor(t *testing.T, host string, caCrt []byte, ca *x509.CertificateAuthority, name string, groups ...string) kubernetes.Interface {
	t.Helper()
	kp, err := x509.NewKeyPair(ca, x509.CommonName(name), x509.Organization(groups...), x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: host, TLSClientConfig: rest.TLSClientConfig{CAData: caCrt, CertData: kp.CrtPEM, KeyData: kp.KeyPEM}})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// With a cluster CA the API server is shaped like a Talos control plane's:
// the CA verifies its serving certificate, and it authenticates exactly the
// client certificates that CA signed (what talosctl kubeconfig issues), so
// an admin certificate from any other CA is refused.
func TestStartWithClusterCA(t *testing.T) {
	ca, pair := newCA(t)
	env := testenv.StartWith(t, testenv.Options{ClusterCA: pair, ServingHosts: []string{"k8s.lab.internal"}})
	ctx := t.Context()

	if string(env.Config.CAData) != string(pair.Crt) {
		t.Error("Env.Config does not verify the server with the cluster CA")
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("as envtest's admin: %v", err)
	}

	// an admin certificate the cluster CA signed, as from the bundle
	admin := clientFor(t, env.Config.Host, pair.Crt, ca, "admin", "system:masters")
	if _, err := admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("as an admin the cluster CA signed: %v", err)
	}

	// the serving certificate is the cluster CA's: a client trusting
	// another CA does not get through the handshake
	otherCA, otherPair := newCA(t)
	if _, err := clientFor(t, env.Config.Host, otherPair.Crt, ca, "admin", "system:masters").CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err == nil || !strings.Contains(err.Error(), "certificate signed by unknown authority") {
		t.Errorf("trusting another CA: %v, want an unknown authority error", err)
	}

	// a client certificate from another CA is not authenticated
	_, err = clientFor(t, env.Config.Host, pair.Crt, otherCA, "admin", "system:masters").CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if !apierrors.IsUnauthorized(err) {
		t.Errorf("a client certificate from another CA: %v, want Unauthorized", err)
	}

	// User signs with the cluster CA too, and grants nothing by itself
	u, err := env.User("viewer")
	if err != nil {
		t.Fatal(err)
	}
	ucs, err := kubernetes.NewForConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ucs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("a user without roles: %v, want Forbidden", err)
	}
}
