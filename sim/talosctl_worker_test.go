//go:build talosctl

package sim_test

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
)

// The real talosctl through a worker's endpoint, each machine on an address
// of its own at the Talos API port, as on a real network: a worker's apid
// forwards nothing (Talos' apid director.go, TestWorkerNoRouting), so
// talosctl -e <worker> -n <control plane> fails whole with "no request
// forwarding", -n <the worker itself> (its address or hostname) is served,
// reads over COSI too, and the same worker is reached through a control
// plane's endpoint.
func TestRealTalosctlWorkerEndpoint(t *testing.T) {
	net := fmt.Sprintf("127.%d.%d", 200+os.Getpid()%50, os.Getpid()/100%250)
	f := simtest.Start(t, simtest.Options{LoopbackNet: net})
	host := func(name string) string { return strings.TrimSuffix(f.Overrides[name], ":50000") }
	cp1, w1 := host("cp-1"), host("worker-1")
	bin, tcPath := realTalosctl(t, f, "worker-1", "worker-1")

	run := func(args ...string) (string, error) { return talosctlErr(bin, tcPath, args...) }

	for _, args := range [][]string{
		{"-e", w1, "-n", cp1, "version"},
		{"-e", w1, "-n", "cp-1", "version"},
		{"-e", w1, "-n", w1 + "," + cp1, "version"},
		{"-e", w1, "-n", cp1, "get", "machinestatus"},
	} {
		out, err := run(args...)
		if err == nil || !strings.Contains(out, "code = PermissionDenied desc = no request forwarding") {
			t.Errorf("talosctl %s: %v, want no request forwarding:\n%s", strings.Join(args, " "), err, out)
		}

		if strings.Contains(out, "NODE:") {
			t.Errorf("talosctl %s printed a node's version from a refused call:\n%s", strings.Join(args, " "), out)
		}
	}

	// the worker itself: a one-to-one call, whose plain reply talosctl
	// labels with the endpoint's address
	for _, self := range []string{w1, "worker-1"} {
		out, err := run("-e", w1, "-n", self, "version")
		if err != nil || !strings.Contains(out, "NODE:        "+w1) || !strings.Contains(out, "Tag:         v1.11.0") {
			t.Errorf("talosctl -e %s -n %s version: %v\n%s", w1, self, err, out)
		}

		out, err = run("-e", w1, "-n", self, "get", "machinestatus")
		if err != nil || !strings.Contains(out, "MachineStatus") {
			t.Errorf("talosctl -e %s -n %s get machinestatus: %v\n%s", w1, self, err, out)
		}
	}

	// through a control plane, the worker is reached by address and by name
	// (the talosconfig devata sim writes: control planes as endpoints)
	for _, node := range []string{w1, "worker-1"} {
		out, err := run("-e", cp1, "-n", node, "version")
		if err != nil || !strings.Contains(out, "NODE:        "+node) {
			t.Errorf("talosctl -e %s -n %s version: %v\n%s", cp1, node, err, out)
		}
	}
}
