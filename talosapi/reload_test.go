package talosapi_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/talosapi"
)

// A talosconfig that Talos renews under a running devata (a pod's Secret
// from kubernetesTalosAPIAccess: 6-hour certificates, swapped into the
// volume by the kubelet) is read again: the next connection presents the
// new certificate, and no session of the old one is resumed. Here the new
// certificate carries another role, so the machine's answer shows which
// one it saw.
func TestDialerReloadsARenewedTalosconfig(t *testing.T) {
	f := simtest.Start(t, simtest.Options{LoopbackNet: "127.77.4"})
	dir := t.TempDir()
	path := filepath.Join(dir, "config")
	write := func(r role.Role) {
		crt, err := secrets.NewAdminCertificateAndKey(time.Now(), f.Bundle.Certs.OS, role.MakeSet(r), 6*time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		data, err := clientconfig.NewConfig("default", []string{"talos.default"}, f.Bundle.Certs.OS.Crt, crt).Bytes()
		if err != nil {
			t.Fatal(err)
		}
		// as the kubelet updates a Secret volume: a new file renamed over the old
		tmp := filepath.Join(dir, ".config.new")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(role.EtcdBackup)
	cfg, err := talosapi.LoadTalosconfig(path)
	if err != nil {
		t.Fatal(err)
	}
	reloading, err := talosapi.NewDialer(cfg, f.Overrides, talosapi.WithReload(path))
	if err != nil {
		t.Fatal(err)
	}
	fixed, err := talosapi.NewDialer(cfg, f.Overrides)
	if err != nil {
		t.Fatal(err)
	}
	m := f.Inventory.Machine("cp-1")
	version := func(d *talosapi.Dialer) error {
		c, err := d.Client(t.Context(), m)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Version(t.Context())
		return err
	}
	for _, d := range []*talosapi.Dialer{reloading, fixed} {
		if err := version(d); client.StatusCode(err) != codes.PermissionDenied {
			t.Fatalf("Version as os:etcd:backup: %v, want PermissionDenied", err)
		}
	}
	write(role.Reader)
	if err := version(reloading); err != nil {
		t.Errorf("Version after the talosconfig was renewed as os:reader: %v, want the new certificate used", err)
	}
	if err := version(fixed); client.StatusCode(err) != codes.PermissionDenied {
		t.Errorf("Version through a dialer without WithReload: %v, want PermissionDenied (it keeps the first certificate)", err)
	}
}
