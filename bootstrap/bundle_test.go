package bootstrap_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/simtest"
)

// With secrets.yaml gone from beside a running cluster's inventory,
// bootstrap refuses and writes no new bundle, whether it dials with the
// cluster's talosconfig or with one it would derive from a new bundle
// (which the machines do not trust).
func TestMissingBundleOnARunningClusterIsNeverReplaced(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	path := filepath.Join(f.Dir, "secrets.yaml")
	for _, tc := range []struct {
		name        string
		talosconfig bool
	}{{"with the cluster's talosconfig", true}, {"with a talosconfig from a new bundle", false}} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			var out bytes.Buffer
			opts := bootstrap.Options{
				InventoryPath: f.Inventory.Path, Overrides: f.Overrides, SkipNodes: true,
				Timeout: 5 * time.Second, Wait: 30 * time.Second, Poll: 50 * time.Millisecond, EtcdSettle: 200 * time.Millisecond, Out: &out,
			}
			if tc.talosconfig {
				opts.Talosconfig = f.Talosconfig(t)
			}
			start := time.Now()
			err := bootstrap.New(opts).Run(context.Background())
			if !errors.Is(err, bootstrap.ErrRefused) || !strings.Contains(err.Error(), "devata gen secrets --from-controlplane-config") {
				t.Fatalf("err = %v; want a refusal saying how to recover the bundle\n%s", err, out.String())
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("the refusal took %s: it waited instead of deciding", d)
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a bundle was written at %s (%v)", path, err)
			}
			for _, m := range f.Sim.Machines() {
				if n := m.Calls("ApplyConfiguration"); n != 0 {
					t.Errorf("%s: %d ApplyConfiguration calls", m.Name(), n)
				}
			}
		})
	}
}
