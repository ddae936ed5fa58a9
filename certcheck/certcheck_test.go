package certcheck_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/certcheck"
	"devata.dev/devata/checks"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/talosapi"
)

// talosconfigValidFor writes a talosconfig for f's OS CA whose client
// certificate (roles r) ends ttl from now, and a dialer that uses it.
func talosconfigValidFor(t *testing.T, f *simtest.Fleet, ttl time.Duration, r ...role.Role) *talosapi.Dialer {
	t.Helper()
	return talosconfigIssued(t, f, time.Now(), ttl, r...)
}

func talosconfigIssued(t *testing.T, f *simtest.Fleet, at time.Time, ttl time.Duration, r ...role.Role) *talosapi.Dialer {
	t.Helper()
	crt, err := secrets.NewAdminCertificateAndKey(at, f.Bundle.Certs.OS, role.MakeSet(r...), ttl)
	if err != nil {
		t.Fatal(err)
	}
	data, err := clientconfig.NewConfig("admin@homelab", nil, f.Bundle.Certs.OS.Crt, crt).Bytes()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "talosconfig")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := talosapi.LoadTalosconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	d, err := talosapi.NewDialer(cfg, f.Overrides)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func pass(t *testing.T, f *simtest.Fleet, d *talosapi.Dialer, o certcheck.Options) *drift.Report {
	t.Helper()
	o.Dialer = d
	fc := &checks.FleetCheck{Inventory: f.Inventory, Desired: f.Desired, Dialer: d, Checks: []string{certcheck.CheckCertificates},
		Families: certcheck.Checks(o), Concurrency: 4, Timeout: 10 * time.Second}
	rep, err := fc.Report(t.Context(), drift.Header{Cluster: "homelab"})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func of(rep *drift.Report, machine, credential string) []drift.Result {
	var out []drift.Result
	for _, r := range rep.Results {
		if r.Machine == machine && r.Check == certcheck.CheckCertificates && (r.Certificate != nil && r.Certificate.Credential == credential ||
			r.Certificate == nil && strings.Contains(r.Reason+strings.Join(r.Evidence, " "), credential)) {
			out = append(out, r)
		}
	}
	return out
}

// The acceptance: a talosconfig that expires in 10 days makes the
// certificates check Drifted, with the command that renews it (the same
// roles); the same talosconfig with a year left is InSync, and a
// threshold of 5 days makes 10 days left InSync too. The sim's apid
// certificates are read from the handshake on every machine.
func TestTalosconfigExpiringIn10DaysIsDrifted(t *testing.T) {
	f := simtest.Start(t, simtest.Options{LoopbackNet: "127.77.36"})
	soon := talosconfigValidFor(t, f, 10*24*time.Hour+time.Hour, role.Admin)
	rep := pass(t, f, soon, certcheck.Options{})
	for _, cp := range f.Inventory.ControlPlanes() {
		rs := of(rep, cp.Name, certcheck.CredTalosconfig)
		if len(rs) != 1 {
			t.Fatalf("%s: %d talosconfig results, want 1: %+v", cp.Name, len(rs), rep.Results)
		}
		r := rs[0]
		if r.Status != drift.StatusDrifted || r.Actual != "10 days left" || !strings.Contains(r.Reason, "expires in 10 days") {
			t.Errorf("%s: %s %q (actual %q), want Drifted, 10 days left", cp.Name, r.Status, r.Reason, r.Actual)
		}
		if !strings.HasPrefix(r.Next, "devata gen talosconfig --roles os:admin --ttl ") {
			t.Errorf("%s: next %q, want the renewal command with the same roles", cp.Name, r.Next)
		}
		if r.Certificate == nil || r.Certificate.Subject != "O=os:admin" {
			t.Errorf("%s: certificate %+v", cp.Name, r.Certificate)
		}
	}
	for _, m := range f.Inventory.Machines {
		rs := of(rep, m.Name, certcheck.CredApid)
		if len(rs) != 1 || rs[0].Status != drift.StatusInSync || rs[0].Certificate == nil {
			t.Errorf("%s: apid results %+v, want one InSync with the certificate read", m.Name, rs)
		}
		if !m.IsControlPlane() && len(of(rep, m.Name, certcheck.CredTalosconfig)) != 0 {
			t.Errorf("%s: a worker reports the talosconfig; the control planes do", m.Name)
		}
	}
	// without a kubeconfig the Kubernetes credentials are Unknown, never InSync
	cp := f.Inventory.ControlPlanes()[0].Name
	for _, r := range rep.Results {
		if r.Machine == cp && strings.Contains(r.Reason, "no kubeconfig") && r.Status != drift.StatusUnknown {
			t.Errorf("%s: %s %q, want Unknown", cp, r.Status, r.Reason)
		}
	}
	if n := len(of(rep, cp, "kubeconfig")); n == 0 {
		t.Errorf("%s: no kubeconfig result", cp)
	}

	var prom strings.Builder
	if err := drift.WritePrometheus(&prom, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(prom.String(), `devata_certificate_days_left{cluster="homelab",credential="talosconfig",machine="`+cp+`"} 10.`) {
		t.Errorf("textfile lacks the talosconfig's days left:\n%s", prom.String())
	}

	if r := of(pass(t, f, soon, certcheck.Options{Threshold: 5 * 24 * time.Hour}), cp, certcheck.CredTalosconfig); len(r) != 1 || r[0].Status != drift.StatusInSync {
		t.Errorf("10 days left with a 5-day threshold: %+v, want InSync", r)
	}
	year := talosconfigValidFor(t, f, 365*24*time.Hour, role.Reader)
	if r := of(pass(t, f, year, certcheck.Options{}), cp, certcheck.CredTalosconfig); len(r) != 1 || r[0].Status != drift.StatusInSync {
		t.Errorf("a year left: %+v, want InSync", r)
	}

	// Talos' kubernetesTalosAPIAccess talosconfig lives 6 hours and is
	// renewed an hour before its end: fresh it is InSync, with 1 hour left
	// (a renewal missed) Drifted.
	if r := of(pass(t, f, talosconfigValidFor(t, f, 6*time.Hour, role.Reader), certcheck.Options{}), cp, certcheck.CredTalosconfig); len(r) != 1 || r[0].Status != drift.StatusInSync {
		t.Errorf("a fresh 6-hour certificate: %+v, want InSync", r)
	}
	late := talosconfigIssued(t, f, time.Now().Add(-5*time.Hour), 6*time.Hour, role.Reader)
	if r := of(pass(t, f, late, certcheck.Options{}), cp, certcheck.CredTalosconfig); len(r) != 1 || r[0].Status != drift.StatusDrifted {
		t.Errorf("a 6-hour certificate with 1 hour left: %+v, want Drifted", r)
	}
}
