//go:build unix

package inventory_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/inventory"
)

// homelab writes the homelab example into a temp dir, with its machine
// list kept and cluster.patches replaced by patches.
func homelab(t *testing.T, patches string) (dir, path string) {
	t.Helper()
	dir = t.TempDir()
	path, err := examples.WriteHomelab(dir)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := strings.Replace(string(data), "patches: [patches/common.yaml]", "patches: "+patches, 1)
	if !strings.Contains(string(data), "patches: [patches/common.yaml]") {
		t.Fatal("homelab has no cluster.patches line to replace")
	}
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir, path
}

func mustFail(t *testing.T, path string, wants ...string) string {
	t.Helper()
	done := make(chan error, 1)
	go func() { _, err := inventory.Load(path); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("Load accepted %s", path)
		}
		for _, w := range wants {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q:\n%s", w, err)
			}
		}
		return err.Error()
	case <-time.After(20 * time.Second):
		t.Fatalf("Load of %s hangs", path)
		return ""
	}
}

// A patch path names a file inside the inventory's directory (after
// symlinks) or in cluster.readableDirs; nothing else is read, and an error
// never quotes what a file holds: a secrets bundle given as a patch, or a
// misspelled key beside a registry password, stays out of the message.
func TestPatchPathsAreConfinedAndNeverQuoted(t *testing.T) {
	t.Run("outside", func(t *testing.T) {
		for _, p := range []string{"/etc/passwd", "../elsewhere.yaml"} {
			_, path := homelab(t, "["+p+"]")
			mustFail(t, path, "cluster.patches[0]", "outside the inventory's directory", "cluster.readableDirs")
		}
	})
	t.Run("symlink out", func(t *testing.T) {
		dir, path := homelab(t, "[patches/link.yaml]")
		if err := os.Symlink("/etc/passwd", filepath.Join(dir, "patches", "link.yaml")); err != nil {
			t.Fatal(err)
		}
		mustFail(t, path, "resolves to /etc/passwd", "outside the inventory's directory")
	})
	t.Run("readableDirs", func(t *testing.T) {
		other := t.TempDir()
		if err := os.WriteFile(filepath.Join(other, "p.yaml"), []byte("machine: {env: {A: b}}\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		_, path := homelab(t, fmt.Sprintf("[%s/p.yaml]\n  readableDirs: [%s]", other, other))
		if _, err := inventory.Load(path); err != nil {
			t.Errorf("a patch in cluster.readableDirs: %v", err)
		}
	})
	t.Run("bundle as a patch", func(t *testing.T) {
		dir, path := homelab(t, "[patches/common.yaml, bundle.yaml]")
		bundle, err := os.ReadFile(filepath.Join("..", "render", "testdata", "secrets.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "bundle.yaml"), bundle, 0o600); err != nil {
			t.Fatal(err)
		}
		msg := mustFail(t, path, "patch bundle.yaml does not load", "unknown keys certs.")
		for _, line := range strings.Split(string(bundle), "\n") {
			if _, v, ok := strings.Cut(line, ": "); ok && len(v) > 12 && strings.Contains(msg, v) {
				t.Errorf("the error quotes the bundle (%.20s…):\n%s", v, msg)
			}
		}
	})
	t.Run("misspelled key beside a password", func(t *testing.T) {
		dir, path := homelab(t, "[typo.yaml]")
		typo := "machine:\n  registries: {config: {r.example.com: {auth: {password: hunter2-secret}}}}\n  kubelett: {image: x}\n"
		if err := os.WriteFile(filepath.Join(dir, "typo.yaml"), []byte(typo), 0o600); err != nil {
			t.Fatal(err)
		}
		if msg := mustFail(t, path, "unknown keys machine.kubelett"); strings.Contains(msg, "hunter2") {
			t.Errorf("the error quotes the password:\n%s", msg)
		}
	})
}

// Only regular files up to inventory.MaxFileSize are read: a FIFO does not
// hang, a device is not read until memory runs out, a huge patch is
// refused with its size.
func TestOnlyBoundedRegularFilesAreRead(t *testing.T) {
	dir, path := homelab(t, "[fifo.yaml, big.yaml]")
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.yaml"), 0o600); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, inventory.MaxFileSize+1)
	if err := os.WriteFile(filepath.Join(dir, "big.yaml"), big, 0o600); err != nil {
		t.Fatal(err)
	}
	mustFail(t, path, "fifo.yaml is not a regular file (a named pipe)", "big.yaml is 4194305 bytes, more than the 4 MiB")
	mustFail(t, "/dev/zero", "read inventory", "/dev/zero is not a regular file (a device)")
}

// Nested aliases cannot expand a small file into billions of values, and
// a file with many problems lists the first ones and counts the rest.
func TestAliasesAndErrorsAreBounded(t *testing.T) {
	// one machine with a thousand labels, referenced a thousand times: a
	// million values from ~15 KB (the probe: 20 s, 2 GB, a million errors)
	var b strings.Builder
	b.WriteString("apiVersion: devata.dev/v1alpha1\nkind: Inventory\ncluster: {name: lab, endpoint: 'https://10.0.0.10:6443'}\nmachines:\n  - &m {name: m, role: worker, address: 10.0.1.1, installDisk: /dev/sda, labels: {")
	for i := range 1000 {
		fmt.Fprintf(&b, "k%d: v, ", i)
	}
	b.WriteString("}}\n")
	for range 1000 {
		b.WriteString("  - *m\n")
	}
	path := filepath.Join(t.TempDir(), "bomb.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	msg := mustFail(t, path, "excessive aliasing")
	if lines := strings.Count(msg, "\n") + 1; lines != 1 {
		t.Errorf("%d error lines, want the aliasing error alone:\n%s", lines, msg)
	}
	// many problems: the first MaxErrors, then a count
	var many strings.Builder
	many.WriteString("apiVersion: devata.dev/v1alpha1\nkind: Inventory\ncluster: {name: lab, endpoint: 'https://10.0.0.10:6443'}\nmachines:\n")
	for i := range 100 {
		fmt.Fprintf(&many, "  - {name: m-%d, role: worker, address: 10.0.1.%d, installDisk: sda}\n", i, i)
	}
	manyPath := filepath.Join(t.TempDir(), "many.yaml")
	if err := os.WriteFile(manyPath, []byte(many.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := mustFail(t, manyPath, "… and 51 more problems"); strings.Count(msg, "\n") != inventory.MaxErrors {
		t.Errorf("want %d lines and a count:\n%s", inventory.MaxErrors, msg)
	}
	t.Logf("alias bomb of %d bytes refused in %s, %d bytes of errors", b.Len(), time.Since(start), len(msg))

	huge := strings.Repeat("v", 1<<20)
	_, path = homelab(t, "[patches/common.yaml]")
	data, _ := os.ReadFile(path)
	if err := os.WriteFile(path, []byte(strings.Replace(string(data), "labels: {topology.kubernetes.io/zone: rack-a", "labels: {topology.kubernetes.io/zone: "+huge, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := mustFail(t, path, "cut short"); len(msg) > 4096 {
		t.Errorf("a 1 MiB label value is echoed: %d bytes of error", len(msg))
	}
}

// BenchmarkLoadLargeInventory loads an inventory of 20,000 machines that
// share their patches: validate indexes machines by name and reads each
// patch once, so the time grows linearly with the machine count.
func BenchmarkLoadLargeInventory(b *testing.B) {
	const n = 20000
	path := simtest.LargeInventory(b, n, "patches/worker.yaml")
	for b.Loop() {
		if _, err := inventory.Load(path); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/n, "µs/machine")
}
