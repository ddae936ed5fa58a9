package sim

import (
	"crypto"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// authority signs the server certificates of configured machines with the
// bundle's OS CA and verifies clients against it. One per fleet.
type authority struct {
	caCert  *x509.Certificate
	caKey   crypto.Signer
	pool    *x509.CertPool
	maint   tls.Certificate // self-signed, shared by every machine in maintenance mode
	certTTL time.Duration
}

func newAuthority(caCrtPEM, caKeyPEM []byte) (*authority, error) {
	pair, err := tls.X509KeyPair(caCrtPEM, caKeyPEM)
	if err != nil {
		return nil, fmt.Errorf("load OS CA: %w", err)
	}

	caCert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("parse OS CA: %w", err)
	}

	signer, ok := pair.PrivateKey.(crypto.Signer)
	if !ok {
		return nil, errors.New("OS CA key cannot sign")
	}

	pool := x509.NewCertPool()
	pool.AddCert(caCert)

	a := &authority{caCert: caCert, caKey: signer, pool: pool, certTTL: 365 * 24 * time.Hour}

	a.maint, err = selfSigned("maintenance-service")
	if err != nil {
		return nil, err
	}

	return a, nil
}

// serverCert issues a key pair the way machined's secrets controller does for
// apid: Ed25519, the node addresses as IP SANs, DigitalSignature, ServerAuth.
func (a *authority) serverCert(host string) (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}

	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(a.certTTL),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}

	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.caCert, pub, a.caKey)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("issue server certificate for %s: %w", host, err)
	}

	return tls.Certificate{Certificate: [][]byte{der, a.caCert.Raw}, PrivateKey: priv}, nil
}

// configuredTLS requires a client certificate from the OS CA carrying exactly
// the ClientAuth extended key usage, as apid does. Each machine presents its
// own certificate, issued when a client first connects.
func (a *authority) configuredTLS() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			mc, ok := hello.Conn.(*machineConn)
			if !ok {
				return nil, errors.New("sim: connection from an unknown listener")
			}

			return mc.s.m.certificate()
		},
		ClientAuth:            tls.RequireAndVerifyClientCert,
		ClientCAs:             a.pool,
		NextProtos:            []string{"h2"},
		VerifyPeerCertificate: verifyClientExtKeyUsage,
	}
}

// maintenanceTLS is what an unconfigured node serves: a certificate nobody
// can verify and no client certificate asked for.
func (a *authority) maintenanceTLS() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{a.maint},
		ClientAuth:   tls.NoClientCert,
		NextProtos:   []string{"h2"},
	}
}

func verifyClientExtKeyUsage(_ [][]byte, chains [][]*x509.Certificate) error {
	if len(chains) == 0 {
		return errors.New("no verified chains")
	}

	for _, cert := range chains[0] {
		if cert.IsCA {
			continue
		}

		if !slices.Equal(cert.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) {
			return fmt.Errorf("certificate %q is missing the client auth extended key usage", cert.Subject)
		}
	}

	return nil
}

// selfSigned is a server certificate signed by its own key, for the
// maintenance service and the simulated kubelets.
func selfSigned(cn string, ips ...net.IP) (tls.Certificate, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}

	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  ips,
	}

	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, priv)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-sign %s certificate: %w", cn, err)
	}

	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: priv}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}

	return n
}
