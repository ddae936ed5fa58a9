package render_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"

	"devata.dev/devata/render"
)

func TestSecretsRoundTripThroughMachinery(t *testing.T) {
	_, b := loadFixture(t)
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := render.WriteSecrets(path, b, false); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("secrets file mode %v, want 0600", st.Mode().Perm())
	}
	// machinery's own loader, the one talosctl uses for --with-secrets.
	back, err := secrets.LoadBundle(path)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := render.MarshalSecrets(b)
	c, _ := render.MarshalSecrets(back)
	if !bytes.Equal(a, c) {
		t.Errorf("bundle changed through write and machinery reload")
	}
	if back.Certs.OS.Key == nil || !bytes.Equal(back.Certs.OS.Key, b.Certs.OS.Key) || back.Secrets.BootstrapToken != b.Secrets.BootstrapToken {
		t.Errorf("reloaded bundle lost secrets")
	}
}

func TestWriteSecretsNeverOverwritesWithoutForce(t *testing.T) {
	_, b := loadFixture(t)
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := render.WriteSecrets(path, b, false)
	if !errors.Is(err, render.ErrExists) {
		t.Fatalf("WriteSecrets over an existing file: %v, want ErrExists", err)
	}
	if data, _ := os.ReadFile(path); string(data) != "precious" {
		t.Fatalf("existing file was changed")
	}
	if err := render.WriteSecrets(path, b, true); err != nil {
		t.Fatalf("with force: %v", err)
	}
	if _, err := render.LoadSecrets(path); err != nil {
		t.Fatalf("forced write does not load: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*tmp*"))
	if len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestLoadSecretsErrorSaysWhatToDo(t *testing.T) {
	_, err := render.LoadSecrets(filepath.Join(t.TempDir(), "missing.yaml"))
	if err == nil || !bytes.Contains([]byte(err.Error()), []byte("devata gen secrets")) {
		t.Errorf("error %v does not say how to create a bundle", err)
	}
}

// A bundle recovered from a rendered control-plane config renders the same configs.
func TestSecretsFromControlPlaneConfig(t *testing.T) {
	inv, b := loadFixture(t)
	orig, err := render.Render(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cpPath := filepath.Join(dir, "cp-1.yaml")
	if err := os.WriteFile(cpPath, orig[0].Config, 0o600); err != nil {
		t.Fatal(err)
	}
	recovered, err := render.SecretsFromConfig(cpPath)
	if err != nil {
		t.Fatal(err)
	}
	again, err := render.Render(inv, recovered)
	if err != nil {
		t.Fatal(err)
	}
	for i := range orig {
		if !bytes.Equal(orig[i].Config, again[i].Config) {
			t.Errorf("%s: config rendered from the recovered bundle differs", orig[i].Machine)
		}
	}
	wPath := filepath.Join(dir, "worker.yaml")
	if err := os.WriteFile(wPath, orig[len(orig)-1].Config, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := render.SecretsFromConfig(wPath); err == nil {
		t.Errorf("recovering from a worker config succeeded; it lacks the CA keys")
	}
}

func TestLoadSecretsErrorsNeverQuoteTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	const secret = "c2VjcmV0LWtleS1tYXRlcmlhbC10aGF0LW11c3Qtbm90LWxlYWs="
	if err := os.WriteFile(path, []byte("cluster:\n  id: x\ncerts: "+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := render.LoadSecrets(path)
	if err == nil {
		t.Fatal("a damaged bundle loaded")
	}
	// yaml.v3 quotes the first 7 characters of a value it cannot decode.
	if bytes.Contains([]byte(err.Error()), []byte(secret[:7])) {
		t.Fatalf("error quotes the secret: %v", err)
	}
}

// A bundle whose bootstrap token the API server would refuse is refused
// on load, without the token in the error.
func TestLoadSecretsRefusesAMalformedBootstrapToken(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := render.LoadSecrets(filepath.Join("testdata", "secrets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const bad = "NOT-A.TOKEN-hunter2"
	path := filepath.Join(t.TempDir(), "secrets.yaml")
	if err := os.WriteFile(path, bytes.Replace(data, []byte(b.Secrets.BootstrapToken), []byte(bad), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = render.LoadSecrets(path)
	if err == nil || !strings.Contains(err.Error(), "secrets.bootstraptoken is not a Kubernetes bootstrap token") || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("malformed token: %v", err)
	}
}

// talosctl-secrets.yaml was written by the real `talosctl gen secrets`
// (v1.11.0, built from the Go module proxy): devata loads and renders with it.
func TestTalosctlBundleLoads(t *testing.T) {
	b, err := render.LoadSecrets("testdata/talosctl-secrets.yaml")
	if err != nil {
		t.Fatal(err)
	}
	inv, _ := loadFixture(t)
	out, err := render.Validated(inv, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(inv.Machines) {
		t.Fatalf("rendered %d", len(out))
	}
	// Re-encoded by devata, the bundle reloads through machinery unchanged.
	path := filepath.Join(t.TempDir(), "again.yaml")
	if err := render.WriteSecrets(path, b, false); err != nil {
		t.Fatal(err)
	}
	again, err := secrets.LoadBundle(path)
	if err != nil {
		t.Fatal(err)
	}
	x, _ := render.MarshalSecrets(b)
	y, _ := render.MarshalSecrets(again)
	if !bytes.Equal(x, y) {
		t.Error("talosctl bundle changed through devata's write")
	}
}
