package main

import (
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"devata.dev/devata/certcheck"
	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/machines"
)

// devata gen talosconfig signs a talosconfig the sim accepts with exactly
// the roles asked (the sim's authz reads them from the certificate as
// Talos' does): os:reader reads the Talos version but not MachineConfig,
// which needs os:admin. Ten days of it make the certificates check
// Drifted with the command that renews it, roles and all.
func TestGenTalosconfigMakesOneTheSimAcceptsWithTheRolesAsked(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	dir := t.TempDir()
	reader := filepath.Join(dir, "reader")
	r := devata(t, nil, "gen", "talosconfig", "--config", sf.settings, "--roles", "os:reader", "--ttl", "240h", "--file", reader)
	if r.code != 0 || !strings.Contains(r.stdout, "context reader@homelab, roles os:reader") {
		t.Fatalf("gen talosconfig: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if st, err := os.Stat(reader); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("talosconfig: %v, mode %v; want 0600", err, st.Mode().Perm())
	}
	cfg, err := clientconfig.Open(reader)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.Context]
	pemCrt, _ := base64.StdEncoding.DecodeString(ctx.Crt)
	b, _ := pem.Decode(pemCrt)
	if b == nil {
		t.Fatal("no certificate in the talosconfig")
	}
	crt, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(crt.Subject.Organization, []string{"os:reader"}) {
		t.Errorf("certificate roles %v, want exactly [os:reader]", crt.Subject.Organization)
	}
	if len(ctx.Endpoints) != 3 || len(ctx.Nodes) != 5 {
		t.Errorf("endpoints %v, nodes %v; want the 3 control planes and the 5 machines", ctx.Endpoints, ctx.Nodes)
	}

	r = devata(t, nil, "drift", "--config", sf.settings, "--talosconfig", reader, "--checks=config,talos-version,certificates", "-o", "json")
	var rep drift.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("exit %d: %v\n%s", r.code, err, r.err)
	}
	seen := map[string]int{}
	for _, res := range rep.Results {
		seen[res.Check]++
		if res.Certificate != nil {
			seen[res.Certificate.Credential]++
		}
		switch {
		case res.Check == machines.CheckTalosVersion && res.Status != drift.StatusInSync:
			t.Errorf("%s: talos-version %s %q: the sim did not accept the os:reader talosconfig", res.Machine, res.Status, res.Reason)
		case res.Check == machines.CheckConfig && (res.Status != drift.StatusUnknown || !strings.Contains(res.Reason, "PermissionDenied") && !strings.Contains(res.Reason, "not authorized")):
			t.Errorf("%s: config %s %q: an os:reader certificate must not read MachineConfig", res.Machine, res.Status, res.Reason)
		case res.Check == certcheck.CheckCertificates && res.Certificate != nil && res.Certificate.Credential == certcheck.CredTalosconfig:
			if res.Status != drift.StatusDrifted || !strings.HasPrefix(res.Next, "devata gen talosconfig --roles os:reader --ttl 8760h") {
				t.Errorf("%s: a 10-day talosconfig: %s, next %q; want Drifted with the renewal command", res.Machine, res.Status, res.Next)
			}
		}
	}

	if seen[machines.CheckConfig] != 5 || seen[machines.CheckTalosVersion] != 5 || seen[certcheck.CredTalosconfig] != 3 {
		t.Errorf("results seen %v: want config and talos-version on 5 machines, the talosconfig on the 3 control planes", seen)
	}

	// unknown roles are refused as talosctl refuses them; a non-regular file is never replaced
	r = devata(t, nil, "gen", "talosconfig", "--config", sf.settings, "--roles", "os:reader,os:root", "--file", filepath.Join(dir, "x"))
	if r.code != exitUsage || !strings.Contains(r.err, "unknown role os:root") || !strings.Contains(r.err, "os:etcd:backup") {
		t.Errorf("an unknown role: exit %d\n%s", r.code, r.err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(reader, link); err != nil {
		t.Fatal(err)
	}
	r = devata(t, nil, "gen", "talosconfig", "--config", sf.settings, "--file", link, "--force")
	if r.code != exitTrouble || !strings.Contains(r.err, "is not a regular file") {
		t.Errorf("--file a symbolic link: exit %d\n%s", r.code, r.err)
	}
	r = devata(t, nil, "gen", "talosconfig", "--config", sf.settings, "--file", reader)
	if r.code != exitTrouble || !strings.Contains(r.err, "--force") {
		t.Errorf("an existing file without --force: exit %d\n%s", r.code, r.err)
	}
}
