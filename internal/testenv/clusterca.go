package testenv

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	stdx509 "crypto/x509"
	"github.com/siderolabs/crypto/x509"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// Options shape the API server Start and Run bring up.
type Options struct {
	// ClusterCA is a Kubernetes CA, as a Talos secrets bundle holds it
	// (certs.k8s). When set, the API server is the one a Talos control
	// plane runs for that bundle: it serves a certificate the CA signed (for
	// 127.0.0.1, ::1, localhost and ServingHosts) and authenticates client
	// certificates the CA signed, so an admin kubeconfig made from the
	// bundle (talosctl kubeconfig) works against it, and Env.Config
	// verifies the server with the CA. Without it envtest makes its own.
	ClusterCA *x509.PEMEncodedCertificateAndKey
	// ServingHosts are more names or addresses in the serving certificate
	// (the cluster endpoint's host).
	ServingHosts []string
	// APIServerArgs are more kube-apiserver flags, by name without the
	// dashes (runtime-config: resource.k8s.io/v1beta1=true, to serve an
	// API that is off by default).
	APIServerArgs map[string]string
	// ServiceSubnets is the cluster's service range (--service-cluster-ip-range,
	// comma-joined, as Talos v1.14.1 control_plane_final.go gives its
	// kube-apiserver the config's service CIDRs). Without it envtest's
	// 10.0.0.0/24 stays, where Talos' kube-dns address (the tenth of
	// 10.96.0.0/12) does not fit: the sim's bootstrap manifests then fail
	// on the kube-dns Service and leave it out, as Talos would
	// (sim/manifests_apply.go). A test whose fleet runs Kubernetes gives
	// its inventory's service subnets.
	ServiceSubnets []string
}

// The file names envtest's API server looks for in its cert dir
// (controlplane/apiserver.go populateAPIServerCerts).
const (
	servingCertFile = "apiserver.crt"
	servingKeyFile  = "apiserver.key"
	saCertFile      = "sa-signer.crt"
	saKeyFile       = "sa-signer.key"
)

// useClusterCA writes, into a new cert dir, the serving certificate and
// service account keys envtest would have made, from opts.ClusterCA, and
// points the API server at it; envtest leaves a populated cert dir alone.
// It returns the cert dir for the caller to remove.
func useClusterCA(api *envtest.APIServer, opts Options) (string, error) {
	ca, err := x509.NewCertificateAuthorityFromCertificateAndKey(opts.ClusterCA)
	if err != nil {
		return "", fmt.Errorf("cluster CA: %w", err)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	dns := []string{"localhost"}
	for _, h := range opts.ServingHosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else if h != "" {
			dns = append(dns, h)
		}
	}
	serving, err := x509.NewKeyPair(ca,
		x509.CommonName("kube-apiserver"),
		x509.IPAddresses(ips),
		x509.DNSNames(dns),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageServerAuth}),
		x509.NotAfter(time.Now().Add(24*time.Hour)),
	)
	if err != nil {
		return "", fmt.Errorf("serving certificate: %w", err)
	}
	sa, err := x509.NewECDSAKey()
	if err != nil {
		return "", fmt.Errorf("service account key: %w", err)
	}
	dir, err := os.MkdirTemp("", "devata-testenv-certs-")
	if err != nil {
		return "", err
	}
	for name, data := range map[string][]byte{
		servingCertFile: serving.CrtPEM,
		servingKeyFile:  serving.KeyPEM,
		saCertFile:      sa.GetPublicKeyPEM(),
		saKeyFile:       sa.GetPrivateKeyPEM(),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			os.RemoveAll(dir)
			return "", err
		}
	}
	api.CertDir = dir
	api.SecureServing.CA = opts.ClusterCA.Crt
	api.SecureServing.Authn = &clusterAuthn{ca: ca, crt: opts.ClusterCA.Crt}
	return dir, nil
}

// clusterAuthn is envtest's client certificate authenticator with the
// cluster's CA in place of one of its own.
type clusterAuthn struct {
	ca   *x509.CertificateAuthority
	crt  []byte
	path string
}

func (a *clusterAuthn) Configure(workDir string, args *envtest.Arguments) error {
	a.path = filepath.Join(workDir, "client-ca.crt")
	args.Set("client-ca-file", a.path)
	return nil
}

func (a *clusterAuthn) Start() error { return os.WriteFile(a.path, a.crt, 0o600) }

func (a *clusterAuthn) Stop() error { return nil }

// AddUser signs a client certificate for the user, as talosctl kubeconfig
// does for the admin (CN the name, O the groups).
func (a *clusterAuthn) AddUser(user envtest.User, base *rest.Config) (*rest.Config, error) {
	kp, err := x509.NewKeyPair(a.ca,
		x509.CommonName(user.Name),
		x509.Organization(user.Groups...),
		x509.ExtKeyUsage([]stdx509.ExtKeyUsage{stdx509.ExtKeyUsageClientAuth}),
		x509.NotAfter(time.Now().Add(24*time.Hour)),
	)
	if err != nil {
		return nil, fmt.Errorf("client certificate for %s: %w", user.Name, err)
	}
	cfg := rest.CopyConfig(base)
	cfg.CertData, cfg.KeyData = kp.CrtPEM, kp.KeyPEM
	return cfg, nil
}
