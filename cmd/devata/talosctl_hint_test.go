//go:build talosctl

// The real talosctl runs the next steps devata prints. It needs talosctl
// built from the Go module proxy (minutes, once): go test -tags talosctl
// -run Talosctl ./cmd/devata/.
package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/machines"
	"devata.dev/devata/sim"
)

type tlog struct{ t *testing.T }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// The upgrade hint of a drifted talos-version, on the sim and through -e
// with --context, is a talosctl command line that reaches that machine: run
// with `version` instead of `upgrade`, the real talosctl prints the
// version worker-1 reports (issue 17: hints named inventory addresses the
// sim does not listen on).
func TestTalosctlRunsTheHintDevataPrints(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	sf := startSim(t, simtest.Options{Bootstrap: true})
	sf.Sim.Machine("worker-1").SetFaults(sim.Faults{TalosVersion: "v1.10.7"})
	tcPath := filepath.Join(filepath.Dir(sf.settings), "talosconfig")
	for _, args := range [][]string{nil, {"-e", sf.Overrides["cp-1"], "--context", "homelab"}} {
		r := devata(t, nil, append([]string{"drift", "--config", sf.settings, "--checks", machines.CheckTalosVersion, "-n", "worker-1", "-o", "json"}, args...)...)
		if r.code != 1 {
			t.Fatalf("drift %v: exit %d, want 1\n%s%s", args, r.code, r.stdout, r.err)
		}
		var rep drift.Report
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatal(err)
		}
		next := rep.Results[0].Next
		prefix, _, ok := strings.Cut(strings.TrimPrefix(next, "upgrade: "), " upgrade --image")
		if !ok || !strings.HasPrefix(prefix, "talosctl ") {
			t.Fatalf("next step %q has no talosctl upgrade command", next)
		}
		words := append(strings.Fields(prefix)[1:], "version", "--short")
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cmd := exec.CommandContext(ctx, bin, append([]string{"--talosconfig", tcPath}, words...)...)
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(words, " "), err, out)
		}
		if !strings.Contains(string(out), "v1.10.7") { // the others report v1.11.0, as talosctl itself
			t.Errorf("%s reached another machine than worker-1:\n%s", strings.Join(words, " "), out)
		}
	}
}

// The real talosctl sees what devata upgrade did: every machine's version
// tag is v1.11.0 after, v1.10.6 before (issue 16).
func TestTalosctlSeesTheUpgrade(t *testing.T) {
	bin, err := testenv.Talosctl(context.Background(), tlog{t})
	if err != nil {
		t.Fatal(err)
	}
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	tcPath := filepath.Join(filepath.Dir(sf.settings), "talosconfig")
	tags := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, bin, "--talosconfig", tcPath, "-n", "cp-1,cp-2,cp-3,worker-1,worker-2", "version", "--short").CombinedOutput()
		if err != nil {
			t.Fatalf("talosctl version: %v\n%s", err, out)
		}
		return string(out)
	}
	const tag = "Tag:         " // talosctl version's line per node
	if before := tags(); strings.Count(before, tag+"v1.10.6") != 5 {
		t.Fatalf("before: talosctl sees\n%s", before)
	}
	if r := devata(t, nil, "upgrade", "--config", sf.settings, "--yes"); r.code != 0 {
		t.Fatalf("upgrade: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if after := tags(); strings.Count(after, tag+"v1.11.0") != 5 {
		t.Errorf("after devata upgrade, talosctl sees\n%s", after)
	}
}
