package talosapi

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"

	"devata.dev/devata/internal/configview"
)

// Identity is who a machine config says its machine is: the cluster it
// belongs to (the cluster id and the CAs of the secrets bundle it was made
// from, by certificate fingerprint) and which machine of that cluster (its
// type and hostname). Two configs of the same machine of the same cluster
// share it whatever else differs; nothing in it is secret.
type Identity struct {
	// ClusterID is cluster.id; OSCA, KubernetesCA and EtcdCA the
	// fingerprints (sha256 of the DER, 12 hex digits) of machine.ca,
	// cluster.ca and cluster.etcd.ca.
	ClusterID, OSCA, KubernetesCA, EtcdCA string
	// Type is machine.type (controlplane, worker); Hostname what the
	// config sets ("" when it leaves it to Talos).
	Type, Hostname string
}

// IdentityOf reads the Identity of a machine config.
func IdentityOf(cfg []byte) (Identity, error) {
	c, err := configloader.NewFromBytes(cfg)
	if err != nil {
		return Identity{}, fmt.Errorf("load config: %w", err)
	}
	var id Identity
	if di := c.DiscoveryIdentityConfig(); di != nil {
		id.ClusterID = di.ClusterID()
	}
	if ca := c.K8sAPIServerCAConfig(); ca != nil {
		// a worker's config holds the CA's certificate only (AcceptedCAs),
		// a control plane's its key too (IssuingCA, listed first)
		if accepted := ca.AcceptedCAs(); len(accepted) > 0 && accepted[0] != nil {
			id.KubernetesCA = fingerprint(accepted[0].Crt)
		}
	}
	if cl := c.Cluster(); cl != nil {
		if etcd := cl.Etcd(); etcd != nil && etcd.CA() != nil {
			id.EtcdCA = fingerprint(etcd.CA().Crt)
		}
	}
	if m := c.Machine(); m != nil {
		id.Type = m.Type().String()
		if sec := m.Security(); sec != nil && sec.IssuingCA() != nil {
			id.OSCA = fingerprint(sec.IssuingCA().Crt)
		}
	}
	id.Hostname = configview.Hostname(c)
	return id, nil
}

// fingerprint is a PEM certificate's sha256, shortened; "" when there is
// none.
func fingerprint(pemData []byte) string {
	block, _ := pem.Decode(pemData)
	if block == nil {
		return ""
	}
	if _, err := x509.ParseCertificate(block.Bytes); err != nil {
		return ""
	}
	sum := sha256.Sum256(block.Bytes)
	return hex.EncodeToString(sum[:6])
}

// IdentityMismatch compares the identity of the config a machine runs
// (running) with the one devata would write to it (desired).
type IdentityMismatch struct {
	// Bundle lists what says the machine belongs to another cluster, or to
	// this one made from another secrets bundle: the cluster id or a CA.
	Bundle []string
	// Machine lists what says it is another machine of the cluster: its
	// type or its hostname.
	Machine []string
}

// Any reports whether the identities differ.
func (m IdentityMismatch) Any() bool { return len(m.Bundle)+len(m.Machine) > 0 }

// CompareIdentity compares running with desired; a field either leaves
// empty is not compared. A hostname that differs is drift a write fixes
// (someone set it by hand), unless it is the name of another machine of
// the inventory (isOther): then the machine answering is that one.
func CompareIdentity(running, desired Identity, isOther func(name string) bool) IdentityMismatch {
	var out IdentityMismatch
	differ := func(to *[]string, what, got, want string) {
		if got != "" && want != "" && got != want {
			*to = append(*to, fmt.Sprintf("%s %s, not %s", what, got, want))
		}
	}
	differ(&out.Bundle, "cluster.id", shortID(running.ClusterID), shortID(desired.ClusterID))
	differ(&out.Bundle, "machine.ca (OS CA) sha256", running.OSCA, desired.OSCA)
	differ(&out.Bundle, "cluster.ca (Kubernetes CA) sha256", running.KubernetesCA, desired.KubernetesCA)
	differ(&out.Bundle, "cluster.etcd.ca sha256", running.EtcdCA, desired.EtcdCA)
	differ(&out.Machine, "machine.type", running.Type, desired.Type)
	if isOther != nil && running.Hostname != desired.Hostname && isOther(running.Hostname) {
		differ(&out.Machine, "hostname", running.Hostname, desired.Hostname+" (it is the inventory's "+running.Hostname+")")
	}
	return out
}

// shortID is a cluster id as errors print it: cluster ids are not secret
// (Talos shows them in ClusterIdentity), but a short prefix tells them
// apart.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12] + "…"
	}
	return id
}

// Reason is the refusal a writing command gives for m at address, and
// what to do about it.
func (m IdentityMismatch) Reason(name, address string) string {
	switch {
	case len(m.Bundle) > 0:
		return fmt.Sprintf("refused: the machine at %s runs a config of another cluster or of another secrets bundle (%s): "+
			"the bundle devata loaded is not the one this machine was made from, and applying would replace its CAs. "+
			"Recover the cluster's bundle (from a control plane's config: devata gen secrets --from-controlplane-config; or a backup, or its encrypted copy); "+
			"a CA rotation is never part of an apply (talosctl rotate-ca)", address, strings.Join(m.Bundle, "; "))
	default:
		return fmt.Sprintf("refused: the machine at %s is not %s (%s): check %s's address in the inventory; nothing is written to a machine that is not the inventory's",
			address, name, strings.Join(m.Machine, "; "), name)
	}
}

// IsForeignCA reports whether err is a TLS handshake that failed because
// the machine's certificate is not signed by the CA the talosconfig trusts
// (Go's x509 "unknown authority", or the Ed25519 verification failure
// Talos' Ed25519 CAs give): the machine runs, configured from another
// secrets bundle than the talosconfig's. It is an answer, not an outage.
func IsForeignCA(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "certificate signed by unknown authority") ||
		strings.Contains(msg, "verification failure") && strings.Contains(msg, "authority certificate")
}
