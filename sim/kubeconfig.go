package sim

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config/config"
)

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// adminKubeconfig writes an admin kubeconfig for the cluster: a client
// certificate from the Kubernetes CA in the config, for the config's endpoint.
// The K8s* accessors read a Talos 1.14 document or the v1alpha1 fields.
func adminKubeconfig(c config.Config) ([]byte, error) {
	caCfg, cluster := c.K8sAPIServerCAConfig(), c.K8sClusterConfig()
	if c.Cluster() == nil || caCfg == nil || caCfg.IssuingCA() == nil || cluster == nil || cluster.ClusterEndpoint() == nil {
		return nil, errors.New("config has no cluster CA or endpoint")
	}

	cc, issuing := c.Cluster(), caCfg.IssuingCA()

	ca, err := tls.X509KeyPair(issuing.Crt, issuing.Key)
	if err != nil {
		return nil, fmt.Errorf("load Kubernetes CA: %w", err)
	}

	caCert, err := x509.ParseCertificate(ca.Certificate[0])
	if err != nil {
		return nil, err
	}

	signer, ok := ca.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("kubernetes CA key cannot sign")
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}

	lifetime := cc.AdminKubeconfig().CertLifetime()
	if lifetime <= 0 {
		lifetime = 365 * 24 * time.Hour
	}

	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cc.AdminKubeconfig().CommonName(), Organization: []string{cc.AdminKubeconfig().CertOrganization()}},
		NotBefore:    time.Now().Add(-10 * time.Second),
		NotAfter:     time.Now().Add(lifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, &key.PublicKey, signer)
	if err != nil {
		return nil, fmt.Errorf("issue admin certificate: %w", err)
	}

	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}

	cas := make([]byte, 0, len(issuing.Crt))
	for _, accepted := range caCfg.AcceptedCAs() {
		cas = append(cas, accepted.Crt...)
	}

	b64 := base64.StdEncoding.EncodeToString
	name := cluster.ClusterName()
	user := "admin@" + name

	var sb strings.Builder

	fmt.Fprintf(&sb, "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: %s\n    server: %s\n  name: %s\n",
		b64(cas), cluster.ClusterEndpoint().String(), name)
	fmt.Fprintf(&sb, "contexts:\n- context:\n    cluster: %s\n    namespace: default\n    user: %s\n  name: %s\ncurrent-context: %s\n", name, user, user, user)
	fmt.Fprintf(&sb, "users:\n- name: %s\n  user:\n    client-certificate-data: %s\n    client-key-data: %s\n",
		user,
		b64(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		b64(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})))

	return []byte(sb.String()), nil
}
