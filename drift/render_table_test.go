package drift_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/drift"
)

func TestTableDetails(t *testing.T) {
	out := string(render(t, renderers()[0].write, fixtureReport(false)))
	for _, want := range []string{
		"NAME       ROLE          ADDRESS     STATUS   CHECKS",
		"cp-1       controlplane  10.20.0.11  InSync   5/5 in sync",
		"cp-2       controlplane  10.20.0.12  Drifted  2/4 in sync",
		"worker-1   worker        10.20.0.21  Unknown  0/2 in sync",
		"worker-10  worker        10.20.0.30  Unknown  0/0 in sync",
		"  config (reconciliation): Drifted\n",
		"    desired:  sha256:9a41f07c3b2e\n    actual:   sha256:3e8d0b6a1f94\n",
		"      -    hostname: cp-2-old\n      +    hostname: cp-2\n",
		// the changes by path, one a line, before the diff
		"    actual:   sha256:3e8d0b6a1f94\n    changes:\n      machine.kubelet.image: \"ghcr.io/siderolabs/kubelet:v1.34.0\" → \"ghcr.io/siderolabs/kubelet:v1.34.1\"\n      machine.network.hostname: \"cp-2-old\" → \"cp-2\"\n    diff:\n",
		"    next:     devata apply --machines cp-2\n",
		"config (reconciliation): Unknown, fail-closed: blocks a rollout",
		"reason:   dial 10.20.0.21:50000: connection error: desc = \"transport: Error while dialing: dial tcp 10.20.0.21:50000: connect: connection refused\"",
		"worker-10 (worker, 10.20.0.30): Unknown, 0/0 in sync\n  no check produced a result",
		"2 in sync, 1 drifted, 2 unknown (5 machines, 14 results) — exit 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	// InSync results have no details.
	if strings.Contains(out, "etcd (resources)") {
		t.Errorf("table details an InSync result:\n%s", out)
	}
	if strings.Contains(out, "\x1b") {
		t.Errorf("table without Color has escape sequences:\n%q", out)
	}
	colored := string(render(t, renderers()[1].write, fixtureReport(false)))
	if !strings.Contains(colored, "\x1b[33mDrifted\x1b[0m") || !strings.Contains(colored, "\x1b[31mUnknown\x1b[0m") {
		t.Errorf("table with Color paints no status:\n%q", colored)
	}
}

// Text observed on a machine cannot drive the terminal: control characters,
// bidi overrides and invalid UTF-8 print escaped, in every field.
func TestTableEscapesObservedText(t *testing.T) {
	r := drift.NewReport(drift.Header{Cluster: "c", Machines: []drift.Machine{{Name: "m\x1b]0;pwned\a", Role: "worker\u202e"}}})
	r.Add(drift.Drifted("labels differ", "zone=a", "zone=\x1b[2Jb\xff").Of("m\x1b]0;pwned\a", "kubelet", drift.RungResources).
		WithDiff("-\tzone: a\n+\tzone: \x1b[2Jb").WithChanges("labels[\"zone\x1b[2J\"]: \"a\" → \"b\u202e\"").WithEvidence("Node \x9b1m").WithNext("look\rhere"))
	r.AddError(errors.New("stopped: \x1b[31mred"))
	out := string(render(t, renderers()[0].write, r))
	for _, bad := range []string{"\x1b", "\a", "\u202e", "\xff", "\r", "\u009b"} {
		if strings.Contains(out, bad) {
			t.Errorf("table holds raw %q:\n%s", bad, out)
		}
	}
	for _, want := range []string{`m\x1b]0;pwned\x07`, `worker\u202e`, `zone=\x1b[2Jb\xff`, "-\tzone: a", `look\x0dhere`, `Node \x9b1m`, `labels["zone\x1b[2J"]: "a" → "b\u202e"`, `stopped: \x1b[31mred`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks escaped %q:\n%s", want, out)
		}
	}
}

func TestTableErrors(t *testing.T) {
	r := drift.NewReport(drift.Header{Cluster: "c", Machines: []drift.Machine{{Name: "cp-1"}}})
	r.Add(drift.InSync().Of("cp-1", "config", drift.RungReconciliation))
	r.AddError(errors.New("render cp-1: patch patches/cp-1.yaml: line 3: unknown field\nsecond line"))
	out := string(render(t, renderers()[0].write, r))
	for _, want := range []string{
		"Errors that stopped part of the run:\n  - render cp-1: patch patches/cp-1.yaml: line 3: unknown field\n    second line\n",
		"1 in sync, 0 drifted, 0 unknown, 1 error (1 machine, 1 result) — exit 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestAutoColor(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := func(string) string { return "" }
	if drift.AutoColor(&bytes.Buffer{}, env) || drift.AutoColor(f, env) {
		t.Errorf("AutoColor is true for a buffer or a regular file")
	}
	if null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
		defer null.Close()
		if drift.AutoColor(null, env) {
			t.Errorf("AutoColor is true for %s, a character device but no terminal", os.DevNull)
		}
	}
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		defer tty.Close()
		if !drift.AutoColor(tty, env) {
			t.Errorf("AutoColor is false on a terminal")
		}
		if drift.AutoColor(tty, func(k string) string { return map[string]string{"NO_COLOR": "1"}[k] }) {
			t.Errorf("AutoColor ignores NO_COLOR")
		}
		if drift.AutoColor(tty, func(k string) string { return map[string]string{"TERM": "dumb"}[k] }) {
			t.Errorf("AutoColor ignores TERM=dumb")
		}
	}
}
