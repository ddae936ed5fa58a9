package main

import (
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

// --cert-days is refused below one day by every command that runs the
// certificates check, with the same message, before anything is asked.
func TestCertDaysRefusedBelowOneDay(t *testing.T) {
	for _, cmd := range [][]string{{"drift"}, {"reconcile", "--once"}} {
		r := devata(t, nil, append(cmd, "--cert-days", "0")...)
		if r.code != exitUsage || !strings.Contains(r.err, "--cert-days 0: give the days left (1 or more) below which a certificate is Drifted") {
			t.Errorf("%v --cert-days 0: exit %d, want 64 and the days asked for\n%s%s", cmd, r.code, r.stdout, r.err)
		}
	}
}

// reconcile's passes run the certificates check with --cert-days as drift
// does: the simulated fleet's talosconfig certificate has 364 days left,
// InSync at the default 30 days and Drifted at 400, in both commands.
func TestCertDaysReachesReconcileAsDrift(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	const drifted = "desired:  >= 400 days left"
	for _, cmd := range [][]string{{"drift"}, {"reconcile", "--once", "--report-only"}} {
		args := append(cmd, "--config", sf.settings, "--checks", "certificates")
		r := devata(t, nil, args...)
		if strings.Contains(r.stdout, "Drifted") || !strings.Contains(r.stdout, " 0 drifted, ") {
			t.Errorf("%v at the default 30 days: exit %d, want the talosconfig's certificate in sync\n%s%s", cmd, r.code, r.stdout, r.err)
		}
		r = devata(t, nil, append(args, "--cert-days", "400")...)
		if !strings.Contains(r.stdout, drifted) || !strings.Contains(r.stdout, "the talosconfig's client certificate (context homelab) expires in") {
			t.Errorf("%v --cert-days 400: exit %d, want the talosconfig's certificate Drifted\n%s%s", cmd, r.code, r.stdout, r.err)
		}
	}
}
