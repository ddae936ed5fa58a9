package image

import (
	"bytes"
	"encoding/pem"
	"fmt"

	"golang.org/x/crypto/x509roots/fallback/bundle"
)

// FallbackCABundle is the PEM bundle of the Mozilla NSS roots that
// golang.org/x/crypto/x509roots/fallback embeds, at the version go.sum pins:
// the same bytes on every build machine, so the image digest does not
// depend on the host's ca-certificates. Roots that NSS trusts only with a
// distrust-after date are left out: a PEM file cannot carry that
// constraint, and trusting them without it would trust more than NSS does.
func FallbackCABundle() []byte {
	var b bytes.Buffer
	for r := range bundle.Roots() {
		if r.Constraint != nil {
			continue
		}
		// pem.Encode into a bytes.Buffer cannot fail.
		_ = pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: r.Certificate})
	}
	return b.Bytes()
}

// ReadCABundle reads a PEM bundle such as Debian's
// /etc/ssl/certs/ca-certificates.crt, for a build that wants the host's roots.
func ReadCABundle(path string) ([]byte, error) {
	b, err := readBounded(path, maxSmall)
	if err != nil {
		return nil, fmt.Errorf("image: CA bundle: %w", err)
	}
	if !bytes.Contains(b, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, fmt.Errorf("image: CA bundle %s holds no PEM certificate: name a PEM file, or leave -ca-bundle out for the pinned NSS roots", path)
	}
	return b, nil
}
