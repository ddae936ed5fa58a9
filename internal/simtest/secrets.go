package simtest

import (
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
)

// BundleSecrets lists every secret value in a bundle (keys, tokens,
// secrets, and each key's PEM body lines, which is what would leak from a
// base64-encoded field), for tests that assert none of them is printed.
func BundleSecrets(b *secrets.Bundle) []string {
	out := []string{
		b.Cluster.Secret, b.Secrets.BootstrapToken, b.Secrets.AESCBCEncryptionSecret,
		b.Secrets.SecretboxEncryptionSecret, b.TrustdInfo.Token,
	}
	for _, k := range [][]byte{b.Certs.Etcd.Key, b.Certs.K8s.Key, b.Certs.K8sAggregator.Key, b.Certs.K8sServiceAccount.Key, b.Certs.OS.Key} {
		if len(k) == 0 {
			continue
		}
		out = append(out, string(k))
		for line := range strings.Lines(string(k)) {
			if line = strings.TrimSpace(line); len(line) > 40 && !strings.HasPrefix(line, "-----") {
				out = append(out, line)
			}
		}
	}
	var nonEmpty []string
	for _, s := range out {
		if s != "" {
			nonEmpty = append(nonEmpty, s)
		}
	}
	return nonEmpty
}
