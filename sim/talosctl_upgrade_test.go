//go:build talosctl

package sim_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/sim"
)

// The real talosctl v1.11.0 upgrades a simulated node: `talosctl upgrade
// --wait=false` (runUpgradeNoWait: the client version check, Upgrade, the
// ack table) and `talosctl version` shows the new tag once the node came
// back. --wait needs the events API, which the sim does not serve.
func TestRealTalosctlUpgrade(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		RebootDelay:  300 * time.Millisecond,
		UpgradeDelay: 300 * time.Millisecond,
		Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.10.6"}},
	})

	tcPath := filepath.Join(t.TempDir(), "talosconfig")
	if err := talosconfig(t, role.MakeSet(role.Admin), f.Machine("w-1").Addr()).Save(tcPath); err != nil {
		t.Fatal(err)
	}

	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()

		// talosctl needs nodes: the name routes to the machine, as apid would
		out, err := exec.CommandContext(ctx, bin, append([]string{"--talosconfig", tcPath, "-n", "w-1"}, args...)...).CombinedOutput()

		return string(out), err
	}

	out, err := run("upgrade", "--image", "ghcr.io/siderolabs/installer:latest", "--wait=false")
	if err == nil || !strings.Contains(out, `error validating installer image "ghcr.io/siderolabs/installer:latest"`) {
		t.Errorf("upgrade to an image the registry lacks: %v\n%s", err, out)
	}

	out, err = run("upgrade", "--image", "ghcr.io/siderolabs/installer:v1.11.0", "--wait=false")
	if err != nil || !strings.Contains(out, "Upgrade request received") {
		t.Fatalf("talosctl upgrade: %v\n%s", err, out)
	}

	t.Log(out)

	deadline := time.Now().Add(20 * time.Second)

	for {
		out, err = run("version")

		// the client's own tag is v1.11.0 too: only the server's counts
		_, server, _ := strings.Cut(out, "Server:")
		if err == nil && strings.Contains(server, "Tag:         v1.11.0") {
			break
		}

		if time.Now().After(deadline) {
			t.Fatalf("talosctl version never showed v1.11.0: %v\n%s", err, out)
		}

		time.Sleep(100 * time.Millisecond)
	}
}
