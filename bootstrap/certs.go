package bootstrap

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

func sameCA(tc *clientconfig.Config, b *secrets.Bundle) bool {
	ctx := tc.Contexts[tc.Context]
	if ctx == nil || b.Certs == nil || b.Certs.OS == nil {
		return false
	}
	ca, err := base64.StdEncoding.DecodeString(ctx.CA)
	if err != nil {
		return false
	}
	return certsEqual(ca, b.Certs.OS.Crt)
}

func certsEqual(a, b []byte) bool {
	ca, cb := firstCert(a), firstCert(b)
	return ca != nil && cb != nil && ca.Equal(cb)
}

func firstCert(pemData []byte) *x509.Certificate {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return nil
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil
	}
	return c
}

func containsCert(bundle, crt []byte) bool {
	want := firstCert(crt)
	if want == nil {
		return false
	}
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil && c.Equal(want) {
			return true
		}
	}
}
