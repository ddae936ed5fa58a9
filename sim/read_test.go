package sim_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"github.com/siderolabs/talos/pkg/machinery/version"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// readFile reads a file through machinery's client, as talosctl read does.
func readFile(t *testing.T, c *client.Client, path string) ([]byte, error) {
	t.Helper()

	r, err := c.Read(t.Context(), path)
	if err != nil {
		return nil, err
	}
	defer r.Close() //nolint:errcheck

	return io.ReadAll(r)
}

// MachineService.Read as machined serves it (v1alpha1_server.go Read):
// the files the sim knows, whole and in order (a config over machined's
// 1024-byte chunks); NotFound with os.Stat's text for a path Talos does
// not have; "path must be a regular file" for a directory; os:admin only;
// not served in maintenance mode. The boot ID is new after a reboot, and
// it is the one the kubelet posts on the Node.
func TestReadServesTheFilesTalosHas(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "m-1"},
	)
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}
	addr := f.Machine("cp-1").Addr()
	c := admin(t, addr)

	osRelease, err := readFile(t, c, "/etc/os-release")
	want, _ := version.OSReleaseFor("Talos", f.Machine("cp-1").Observe().TalosVersion)
	if err != nil || !bytes.Equal(osRelease, want) {
		t.Errorf("read /etc/os-release: %q, %v; want %q", osRelease, err, want)
	}
	cfg, err := readFile(t, c, "/system/state/config.yaml")
	if err != nil || !bytes.Equal(cfg, cp) {
		t.Errorf("read /system/state/config.yaml: %d bytes, %v; want the %d bytes of the config applied", len(cfg), err, len(cp))
	}
	if len(cp) <= 1024 {
		t.Fatalf("the config is %d bytes: too short to cross a chunk", len(cp))
	}
	boot, err := readFile(t, c, "proc/sys/kernel/random/boot_id") // relative to machined's /
	if err != nil || len(boot) != 37 || boot[36] != '\n' || boot[14] != '4' {
		t.Fatalf("read boot_id: %q, %v; want a version 4 UUID and a newline", boot, err)
	}

	for path, code := range map[string]codes.Code{
		"/etc/nope":                 codes.NotFound,
		"/var/log/../../etc/shadow": codes.NotFound,
		"/proc":                     codes.Unknown,
		"/":                         codes.Unknown,
		"/system/state":             codes.Unknown,
	} {
		_, err := readFile(t, c, path)
		switch {
		case client.StatusCode(err) != code:
			t.Errorf("read %s: %v; want %s", path, err, code)
		case code == codes.NotFound && !strings.Contains(err.Error(), "stat "+path+": no such file or directory"):
			t.Errorf("read %s: %v; want os.Stat's text", path, err)
		case code == codes.Unknown && !strings.Contains(err.Error(), "path must be a regular file"):
			t.Errorf("read %s: %v; want path must be a regular file", path, err)
		}
	}

	for _, r := range []role.Role{role.Operator, role.Reader, role.EtcdBackup} {
		if _, err := readFile(t, dial(t, role.MakeSet(r), addr), "/etc/os-release"); client.StatusCode(err) != codes.PermissionDenied {
			t.Errorf("read as %s: %v; want PermissionDenied (os:admin only)", r, err)
		}
	}
	if _, err := readFile(t, insecure(t, f.Machine("m-1").Addr()), "/etc/os-release"); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("read in maintenance mode: %v; want Unimplemented", err)
	}

	if err := c.Reboot(t.Context()); err != nil {
		t.Fatalf("reboot: %v", err)
	}
	eventually(t, "a new boot ID after the reboot", func() error {
		again, err := readFile(t, c, "/proc/sys/kernel/random/boot_id")
		switch {
		case err != nil:
			return err
		case bytes.Equal(again, boot):
			return errors.New("the boot ID of before the reboot")
		}
		return nil
	})
}
