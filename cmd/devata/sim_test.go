package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
)

// devata sim serves the inventory; devata drift, pointed at it by the
// settings file it wrote, sees it; a faults file written from outside shows up.
func TestSimCommandServesTheInventory(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	dir := t.TempDir()
	inv := homelabWithFixtureBundle(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb simtest.Output
	done := make(chan int)
	go func() {
		done <- run(ctx, []string{"sim", "-i", inv, "--dir", dir, "--maintenance=worker-2", "--kubernetes=false"}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	}()
	settings := filepath.Join(dir, "devata.yaml")
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(out.String(), "serving until interrupted") {
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("sim did not start:\n%s%s", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{"SIMULATED", "export DEVATA_CONFIG=" + settings, "export TALOSCONFIG=" + filepath.Join(dir, "talosconfig"), "worker-2", "maintenance"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("sim output lacks %q:\n%s", want, out.String())
		}
	}
	if st, err := os.Stat(filepath.Join(dir, "talosconfig")); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("talosconfig: %v", err)
	}

	r := devata(t, nil, "drift", "--config", settings, "--checks=config,talos-version", "-o", "json")
	if r.code != 1 || !strings.Contains(r.stdout, "maintenance mode") || !strings.Contains(r.stdout, `"simulated": true`) {
		t.Errorf("drift against devata sim: exit %d\n%s", r.code, r.stdout)
	}

	if err := os.WriteFile(filepath.Join(dir, "faults.yaml"), []byte("cp-1: {talosVersion: v1.10.6}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		r = devata(t, nil, "drift", "--config", settings, "--checks=talos-version", "--machines=cp-1")
		if r.code == 1 && strings.Contains(r.stdout, "v1.10.6") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the faults file was not applied: exit %d\n%s", r.code, r.stdout)
		}
		time.Sleep(100 * time.Millisecond)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("sim exited %d after interrupt", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not stop on interrupt")
	}
}
