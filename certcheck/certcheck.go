// Package certcheck is the certificates check: how many days the
// credentials devata and its operators live on have left (the talosconfig's
// client certificate, the kubeconfig's, the API server's and each apid's
// serving certificate), each with the command that renews it. It reads
// certificates only; it renews nothing.
package certcheck

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"k8s.io/client-go/rest"

	"devata.dev/devata/checks/target"
	"devata.dev/devata/drift"
	"devata.dev/devata/talosapi"
)

// CheckCertificates is the check's name, as `devata drift --checks` takes it.
const CheckCertificates = "certificates"

// DefaultThreshold is how close to its end a credential turns Drifted.
const DefaultThreshold = 30 * 24 * time.Hour

// Credential names, as results and the textfile's credential label have them.
const (
	CredTalosconfig   = "talosconfig"
	CredKubeconfig    = "kubeconfig"
	CredKubeAPIServer = "kube-apiserver"
	CredApid          = "apid"
)

// Options is what the check reads besides each machine's connection.
type Options struct {
	// Dialer is the pass's: its talosconfig context's client certificate,
	// and whether a machine is reached through an endpoint.
	Dialer *talosapi.Dialer
	// Kube is the kubeconfig's client config (or the pod's service
	// account); nil when there is none.
	Kube *rest.Config
	// Threshold is how close to its end a credential turns Drifted;
	// zero means DefaultThreshold.
	Threshold time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Checks is the certificates check with what it reads besides each
// machine's connection. The talosconfig, kubeconfig and API server
// certificates are the cluster's, read once per pass and reported on each
// control plane (the API server runs there, the talosconfig's endpoints are
// there); every machine reports the serving certificate its apid presented.
func Checks(o Options) []drift.Check[*target.Target] {
	if o.Threshold <= 0 {
		o.Threshold = DefaultThreshold
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return []drift.Check[*target.Target]{{Name: CheckCertificates, Rung: drift.RungResources, Run: o.run, Kubernetes: true}}
}

// clusterKey holds the pass's findings of the cluster's credentials.
type clusterKey struct{}

func (o Options) run(ctx context.Context, t *target.Target) []drift.Result {
	mc := &machineCerts{threshold: o.Threshold, now: o.Now()}
	if t.Machine.IsControlPlane() {
		// read by the first control plane, whatever its deadline did
		mc.findings = append(mc.findings, target.Shared(ctx, t, clusterKey{}, func(ctx context.Context) ([]finding, bool) { return o.cluster(ctx), true })...)
	}
	mc.findings = append(mc.findings, o.apid(ctx, t))
	out := make([]drift.Result, 0, len(mc.findings))
	for _, f := range mc.findings {
		out = append(out, f.result(mc))
	}
	return out
}

// machineCerts is one machine's certificates as a pass read them.
type machineCerts struct {
	threshold time.Duration
	now       time.Time
	findings  []finding
}

// finding is one credential's certificate, or why it could not be read.
type finding struct {
	credential string
	what       string // "the talosconfig's client certificate (context admin@devata)"
	crt        *x509.Certificate
	none       string // set when the credential has no certificate: why
	err        error
	// renewedByTalos: machined issues it anew at half its life, so only a
	// certificate past that point (a quarter of its life left) is late.
	renewedByTalos bool
	renew          string // the command that renews it
	unknownNext    string
}

func (f finding) result(t *machineCerts) drift.Result {
	switch {
	case f.err != nil:
		return drift.Unknown(fmt.Errorf("%s: %w", f.what, f.err), f.unknownNext)
	case f.crt == nil:
		return drift.InSync(f.what + ": " + f.none)
	}
	c := f.crt
	left := c.NotAfter.Sub(t.now)
	days := daysLeft(left)
	cert := drift.Certificate{Credential: f.credential, Subject: subject(c), NotBefore: c.NotBefore.UTC(), NotAfter: c.NotAfter.UTC()}
	evidence := fmt.Sprintf("%s %s: notAfter %s, %s", f.what, cert.Subject, c.NotAfter.UTC().Format(time.RFC3339), daysText(days))
	limit, desired := t.threshold, fmt.Sprintf(">= %d days left", int(t.threshold.Hours()/24))
	if life := c.NotAfter.Sub(c.NotBefore); (f.renewedByTalos || life <= rotatedLife) && life/4 < limit {
		// renewed long before any threshold: late only once a quarter is left
		limit, desired = life/4, fmt.Sprintf(">= %s left (a certificate of %s is renewed long before it ends)", life/4, life)
	}
	if left >= limit {
		return drift.InSync(evidence).WithCertificate(cert)
	}
	reason := fmt.Sprintf("%s expires in %s, on %s", f.what, daysText(days), c.NotAfter.UTC().Format(time.DateOnly))
	if left <= 0 {
		reason = fmt.Sprintf("%s expired %s ago, on %s", f.what, daysText(-days), c.NotAfter.UTC().Format(time.DateOnly))
	}
	return drift.Drifted(reason, desired, daysText(days)+" left").WithEvidence(evidence).WithNext(f.renew).WithCertificate(cert)
}

// rotatedLife is the longest life of a certificate taken for one that
// something renews on its own, whatever the credential: Talos gives a
// kubernetesTalosAPIAccess talosconfig 6 hours and renews it an hour before
// its end (kubeaccess/serviceaccount crd_controller.go certTTL,
// certRenewThreshold), apid's own 24 hours (secrets/api.go). A threshold
// in days means nothing to them.
const rotatedLife = 24 * time.Hour

// daysLeft is whole days, rounded toward zero.
func daysLeft(d time.Duration) int { return int(math.Trunc(d.Hours() / 24)) }

func daysText(days int) string {
	if days == 1 || days == -1 {
		return fmt.Sprintf("%d day", days)
	}
	return fmt.Sprintf("%d days", days)
}

// subject names the certificate as talosctl config info and kubectl show
// it: CN and organizations (Talos roles, Kubernetes groups). No serial, no key.
func subject(c *x509.Certificate) string {
	var parts []string
	if c.Subject.CommonName != "" {
		parts = append(parts, "CN="+c.Subject.CommonName)
	}
	if len(c.Subject.Organization) > 0 {
		parts = append(parts, "O="+strings.Join(c.Subject.Organization, "+"))
	}
	if len(parts) == 0 {
		return "(no subject)"
	}
	return strings.Join(parts, ", ")
}

// cluster reads the talosconfig's, the kubeconfig's and the API server's
// certificates.
func (o Options) cluster(ctx context.Context) []finding {
	return []finding{o.talosconfig(), o.kubeconfig(), o.apiServer(ctx)}
}

func (o Options) talosconfig() finding {
	f := finding{credential: CredTalosconfig, what: "the talosconfig's client certificate",
		unknownNext: "talosctl config info (the talosconfig's certificate could not be read)"}
	if o.Dialer == nil {
		f.err = errors.New("no talosconfig")
		return f
	}
	crt, tcContext, err := o.Dialer.ClientCertificate()
	f.what += " (context " + tcContext + ")"
	f.crt, f.err = crt, err
	if crt == nil && err == nil {
		f.none = "no client certificate (the context authenticates otherwise, as Omni's do): nothing of devata's expires"
	}
	if crt != nil {
		f.renew = RenewTalosconfig(crt.Subject.Organization)
	}
	return f
}

// RenewTalosconfig is the command that signs a talosconfig with the same
// roles for a year.
func RenewTalosconfig(roles []string) string {
	r := strings.Join(roles, ",")
	if r == "" {
		r = "os:reader"
	}
	return "devata gen talosconfig --roles " + r + " --ttl 8760h --file talosconfig.new (signs one from the secrets bundle's OS CA, as talosctl config new does through the API), then use it in place of the old one (--talosconfig, TALOSCONFIG)"
}

const renewKubeconfig = "fetch it anew through the Talos API: talosctl -n CONTROL_PLANE kubeconfig --force KUBECONFIG_PATH (Talos signs an admin kubeconfig for cluster.adminKubeconfig.certLifetime, a year by default); a kubeconfig from elsewhere renews where it came from"

func (o Options) kubeconfig() finding {
	f := finding{credential: CredKubeconfig, what: "the kubeconfig's client certificate", renew: renewKubeconfig,
		unknownNext: "check the kubeconfig's client-certificate-data: kubectl config view --raw --minify"}
	cfg := o.Kube
	switch {
	case cfg == nil:
		f.err = errors.New("no kubeconfig")
		f.unknownNext = "pass --kubeconfig (or set KUBECONFIG) so its certificate can be read"
		return f
	case len(cfg.CertData) == 0 && cfg.CertFile == "":
		f.none = "no client certificate (a token, an exec plugin or a service account authenticates): nothing here expires that devata can read"
		return f
	}
	data := cfg.CertData
	if len(data) == 0 {
		var err error
		if data, err = os.ReadFile(cfg.CertFile); err != nil {
			f.err = err
			return f
		}
	}
	f.crt, f.err = firstCertificate(data)
	return f
}

// apiServer reads the serving certificate of the kubeconfig's server by a
// TLS handshake: it is verified against the kubeconfig's CA at a time it
// was valid, so an expired one is read and reported, and a stranger's
// (another CA) is not.
func (o Options) apiServer(ctx context.Context) finding {
	f := finding{credential: CredKubeAPIServer, what: "the Kubernetes API server's serving certificate", renewedByTalos: true,
		renew:       "Talos issues it from the Kubernetes CA and renews it at half its life (secrets.KubernetesCertificatesController): a certificate this close to its end was not renewed; talosctl -n CONTROL_PLANE logs controller-runtime says why, and a reboot of the control plane issues it anew",
		unknownNext: "check that the API server answers at the kubeconfig's server: kubectl cluster-info"}
	cfg := o.Kube
	if cfg == nil {
		f.err = errors.New("no kubeconfig")
		f.unknownNext = "pass --kubeconfig (or set KUBECONFIG) so the API server's certificate can be read"
		return f
	}
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Host == "" {
		f.err = fmt.Errorf("kubeconfig server %q is not a URL", cfg.Host)
		return f
	}
	f.what += " at " + u.Host
	if u.Scheme != "https" {
		f.none = "the server is not https: no certificate"
		return f
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), "443")
	}
	tc, err := rest.TLSConfigFor(cfg)
	if err != nil {
		f.err = err
		return f
	}
	serverName := u.Hostname()
	if tc != nil && tc.ServerName != "" {
		serverName = tc.ServerName
	}
	var roots *x509.CertPool
	if tc != nil {
		roots = tc.RootCAs
	}
	var leaf *x509.Certificate
	conf := &tls.Config{
		ServerName:         serverName,
		InsecureSkipVerify: true, //nolint:gosec // verified below against the kubeconfig's CA, at a time the certificate was valid
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("no serving certificate")
			}
			l := cs.PeerCertificates[0]
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			if roots != nil {
				if _, err := l.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, DNSName: serverName, CurrentTime: l.NotBefore.Add(time.Second)}); err != nil {
					return fmt.Errorf("the serving certificate is not the kubeconfig's CA's: %w", err)
				}
			}
			leaf = l
			return nil
		},
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: conf}).DialContext(ctx, "tcp", host)
	if err != nil {
		f.err = err
		return f
	}
	_ = conn.Close()
	f.crt = leaf
	return f
}

// apid reads the serving certificate the machine's apid presented on a
// Version call. Through an endpoint the TLS peer is the endpoint's apid,
// which its own machine reports.
func (o Options) apid(ctx context.Context, mt *target.Target) finding {
	c := mt.Client
	f := finding{credential: CredApid, what: "apid's serving certificate", renewedByTalos: true,
		renew:       "machined issues apid's certificate from the OS CA and renews it at half its life (secrets APIController): one this close to its end was not renewed; " + talosctl(mt, "logs controller-runtime") + " says why",
		unknownNext: talosctlHint(mt)}
	switch {
	case mt.Obs != nil && mt.Obs.Err != nil:
		f.err = mt.Obs.Err
		return f
	case c == nil:
		f.err = errors.New("no Talos connection")
		return f
	case o.Dialer != nil && o.Dialer.Proxied(ctx, mt.Machine):
		f.none = "reached through an endpoint: the certificate presented was the endpoint's, which that machine reports"
		return f
	}
	var p peer.Peer
	if _, err := c.Version(ctx, grpc.Peer(&p)); err != nil {
		f.err = fmt.Errorf("Version: %w", err)
		return f
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		f.err = errors.New("the connection carries no TLS peer certificate")
		return f
	}
	f.crt = ti.State.PeerCertificates[0]
	return f
}

func talosctl(mt *target.Target, args string) string {
	prefix := mt.Talosctl
	if prefix == "" {
		prefix = "talosctl -n " + mt.Machine.Address
	}
	return prefix + " " + args
}

func talosctlHint(mt *target.Target) string { return talosctl(mt, "version") }

func firstCertificate(data []byte) (*x509.Certificate, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM certificate")
		}
		if b.Type == "CERTIFICATE" {
			return x509.ParseCertificate(b.Bytes)
		}
	}
}
