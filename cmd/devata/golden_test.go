package main

// The golden tests hold every command's output, in each format it offers,
// to a file under testdata/golden, one file per command and format, in
// flux2's manner: `go test ./cmd/devata -run Golden -update` rewrites them,
// and the diff is reviewed as code is. Each group shares one simulated
// fleet. What changes from run to run is replaced by a placeholder that
// says what stood there, by the rules each test names (stableRules and
// fleetRules below); everything else is held byte for byte. Checks that a
// golden cannot make (what must never appear, exit codes, files written)
// stay next to them as assertions.

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/golden"
	"devata.dev/devata/internal/simtest"
)

// stableRules replace what no fleet decides: wall-clock times (RFC 3339,
// and the compact form in snapshot names) and durations measured by a run
// (JUnit's time attributes, a log line's duration=). A placeholder has the
// width of what it replaces where tables align on it.
var stableRules = []golden.Rule{
	golden.Pattern(`\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})`, "YYYY-MM-DDThh:mm:ssZ"),
	golden.Pattern(`\d{8}T\d{6}\.\d+Z`, "YYYYMMDDThhmmss.nZ"),
	golden.Pattern(`time="[0-9.]+"`, `time="<seconds>"`),
	golden.Pattern(`duration=\S+`, "duration=<measured>"),
	golden.Pattern(`(_timestamp_seconds\{[^}]*\}) \S+`, "$1 <unix time>"),
	// a certificate signed at the start of the test has 364.99… days left,
	// a little fewer each second; the whole days in the text stay
	golden.Pattern(`(devata_certificate_days_left\{[^}]*\}) \S+`, "$1 <days left>"),
}

// fleetRules replace what a simulated fleet draws at random: each machine's
// loopback port (the address becomes <name:port>; a table's column is as
// wide as the address was, so a row may look out of line), the test's
// temporary directory (<dir>), and how an unreachable machine's connection
// ended: the sim closes it, and whether the client reads EOF or a reset
// is a race (YAML may fold the line before it).
func fleetRules(sf *simFleet) []golden.Rule {
	rules := []golden.Rule{golden.Literal(sf.Dir, "<dir>")}
	for _, m := range sf.Sim.Machines() {
		rules = append(rules, golden.Literal(m.Addr(), "<"+m.Name()+":port>"))
	}
	rules = append(rules, golden.Pattern(`not reachable:(\s+)(?:EOF|connection\s+reset\s+by\s+peer)\s+\(Unavailable\)`, "not reachable:${1}<EOF or connection reset by peer> (Unavailable)"))
	return append(rules, stableRules...)
}

// assertGolden holds r's stdout to testdata/golden/<name> and, when r wrote
// to stderr, its stderr to <name>.stderr.txt (x.txt: x.stderr.txt); the
// exit code must be code. Both pass through rules first.
func assertGolden(t *testing.T, name string, r result, code int, rules []golden.Rule) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit %d, want %d\n%s%s", r.code, code, r.stdout, r.err)
	}
	golden.Assert(t, filepath.Join("testdata", "golden", name), []byte(golden.Normalise(r.stdout, rules...)))
	if r.err != "" {
		golden.Assert(t, filepath.Join("testdata", "golden", strings.TrimSuffix(name, ".txt")+".stderr.txt"), []byte(golden.Normalise(r.err, rules...)))
	}
}

// Commands that read only files: help, version, validate, gen and a usage
// error. The inventory is the homelab example with the committed fixture
// bundle, so that rendered sizes do not change with random keys.
func TestGoldenOffline(t *testing.T) {
	inv := homelab(t)
	dir := filepath.Dir(inv)
	fixture, err := os.ReadFile(simtest.FixtureSecrets())
	if err != nil {
		t.Fatal(err)
	}
	rules := append([]golden.Rule{
		golden.Literal(dir, "<dir>"),
		// the toolchain and platform the test binary was built with
		golden.Pattern(`\(go[0-9.]+[^,]*, [a-z0-9]+/[a-z0-9]+\)`, "(go<version>, <os>/<arch>)"),
	}, stableRules...)

	t.Run("help", func(t *testing.T) {
		assertGolden(t, "help.txt", devata(t, nil, "--help"), 0, rules)
	})
	t.Run("version", func(t *testing.T) {
		assertGolden(t, "version.txt", devata(t, nil, "version"), 0, rules)
	})
	t.Run("usage error", func(t *testing.T) {
		assertGolden(t, "usage-error.txt", devata(t, nil, "plan", "-i", inv, "-o", "yaml"), exitUsage, rules)
	})
	t.Run("validate without a bundle", func(t *testing.T) {
		// stdout's config sizes change with the throwaway bundle's random
		// keys: only stderr, which says it is a throwaway, is held
		r := devata(t, nil, "validate", "-i", inv)
		if r.code != 0 {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.err)
		}
		golden.Assert(t, filepath.Join("testdata", "golden", "validate-throwaway.stderr.txt"), []byte(golden.Normalise(r.err, rules...)))
	})
	t.Run("validate invalid", func(t *testing.T) {
		data, err := os.ReadFile("../../inventory/testdata/invalid-many-faults.yaml")
		if err != nil {
			t.Fatal(err)
		}
		bad := filepath.Join(dir, "invalid.yaml")
		if err := os.WriteFile(bad, data, 0o644); err != nil {
			t.Fatal(err)
		}
		assertGolden(t, "validate-invalid.txt", devata(t, nil, "validate", "-i", bad), 1, rules)
	})
	t.Run("gen secrets", func(t *testing.T) {
		sub := t.TempDir()
		path, err := filepathCopyInventory(inv, sub)
		if err != nil {
			t.Fatal(err)
		}
		r := devata(t, nil, "gen", "secrets", "-i", path)
		assertGolden(t, "gen-secrets.txt", r, 0, append([]golden.Rule{golden.Literal(sub, "<dir>")}, rules...))
		bundle, err := os.ReadFile(filepath.Join(sub, "secrets.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		// the output names the bundle; a key of it must not be there
		for _, line := range strings.Split(string(bundle), "\n") {
			if _, v, ok := strings.Cut(line, ": "); ok && len(v) > 40 && strings.Contains(r.stdout+r.err, v) {
				t.Errorf("gen secrets printed a value of the bundle (%.8s…)", v)
			}
		}
	})
	if err := os.WriteFile(filepath.Join(dir, "secrets.yaml"), fixture, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("validate", func(t *testing.T) {
		assertGolden(t, "validate.txt", devata(t, nil, "validate", "-i", inv), 0, rules)
	})
	t.Run("gen config", func(t *testing.T) {
		out := filepath.Join(dir, "out")
		assertGolden(t, "gen-config.txt", devata(t, nil, "gen", "config", "-i", inv, "--dir", out), 0, rules)
		assertGolden(t, "gen-config-again.txt", devata(t, nil, "gen", "config", "-i", inv, "--dir", out), 0, rules)
	})
}

// filepathCopyInventory copies the inventory at path and its patches into
// dir and returns the copy's path.
func filepathCopyInventory(path, dir string) (string, error) {
	src := filepath.Dir(path)
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dir, rel), 0o755)
		}
		if rel == "secrets.yaml" || !strings.HasSuffix(rel, ".yaml") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, rel), data, 0o644)
	})
	return filepath.Join(dir, filepath.Base(path)), err
}

// Drift in every format, the plan in every format, apply's and reconcile's
// dry runs, on one fleet: etcd bootstrapped, cp-2's config edited behind
// devata's back, worker-2 unreachable. No kubeconfig: the Kubernetes-side
// checks report Unknown and say how to give one.
func TestGoldenFleet(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	appliesBefore, bootstrapsBefore := writes(sf.Sim) // the fleet's own bootstrap
	sf.Drift(t, "cp-2", "time.cloudflare.com", "pool.ntp.org")
	w2 := sf.Sim.Machine("worker-2")
	faults := w2.Faults()
	faults.Unreachable = true
	w2.SetFaults(faults)
	rules := fleetRules(sf)
	cfg := []string{"--config", sf.settings}
	var all strings.Builder // every byte printed, searched for secrets at the end
	devata := func(t *testing.T, env map[string]string, args ...string) result {
		t.Helper()
		r := devata(t, env, args...)
		all.WriteString(r.stdout + r.err)
		return r
	}

	for _, f := range []struct{ format, file string }{
		{"table", "drift.txt"}, {"json", "drift.json"}, {"yaml", "drift.yaml"},
		{"junit", "drift.junit.xml"}, {"prom", "drift.prom"}, {"html", "drift.html"},
	} {
		t.Run("drift "+f.format, func(t *testing.T) {
			assertGolden(t, f.file, devata(t, nil, append([]string{"drift", "-o", f.format}, cfg...)...), 2, rules)
		})
	}
	t.Run("drift machine checks", func(t *testing.T) {
		assertGolden(t, "drift-machine-checks.txt", devata(t, nil, append([]string{"drift", machineChecks}, cfg...)...), 2, rules)
	})
	t.Run("drift one machine", func(t *testing.T) {
		assertGolden(t, "drift-cp-2.txt", devata(t, nil, append([]string{"drift", "--machines", "cp-2", machineChecks}, cfg...)...), 1, rules)
	})
	for _, f := range []struct{ format, file string }{
		{"text", "plan.txt"}, {"markdown", "plan.md"}, {"json", "plan.json"},
	} {
		t.Run("plan "+f.format, func(t *testing.T) {
			assertGolden(t, f.file, devata(t, nil, append([]string{"plan", "--skip-nodes", "-o", f.format}, cfg...)...), 2, rules)
		})
	}
	for _, f := range []struct{ format, file string }{{"text", "apply-dry-run.txt"}, {"json", "apply-dry-run.json"}} {
		t.Run("apply dry run "+f.format, func(t *testing.T) {
			assertGolden(t, f.file, devata(t, nil, append([]string{"apply", "--dry-run", "-o", f.format}, cfg...)...), 2, rules)
		})
	}
	t.Run("reconcile once dry run", func(t *testing.T) {
		r := devata(t, nil, append([]string{"reconcile", "--once", "--dry-run", machineChecks}, cfg...)...)
		// the identity is the host's name and a random suffix
		assertGolden(t, "reconcile-once-dry-run.txt", r, 2, append([]golden.Rule{golden.Pattern(`identity=[^\s)]+`, "identity=<host>_<random>")}, rules...))
	})
	if applies, bootstraps := writes(sf.Sim); applies != appliesBefore || bootstraps != bootstrapsBefore {
		t.Errorf("dry runs and reports wrote: %d applies, %d bootstraps", applies, bootstraps)
	}
	if !strings.Contains(all.String(), "pool.ntp.org") {
		t.Fatal("the drifted field is in no output: the search for secrets below would prove nothing")
	}
	for _, s := range simtest.BundleSecrets(sf.Bundle) {
		if strings.Contains(all.String(), s) {
			t.Fatalf("an output holds a secret of the bundle (%.8s…)", s)
		}
	}
}

// The upgrade plan, in text and JSON, for a fleet one minor release behind
// the inventory's cluster.talosVersion.
func TestGoldenUpgrade(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true, TalosVersion: "v1.10.6"})
	rules := fleetRules(sf)
	for _, f := range []struct{ format, file string }{{"text", "upgrade-dry-run.txt"}, {"json", "upgrade-dry-run.json"}} {
		t.Run(f.format, func(t *testing.T) {
			assertGolden(t, f.file, devata(t, nil, "upgrade", "--dry-run", "-o", f.format, "--config", sf.settings), 1, rules)
		})
	}
}

// backup etcd, list, verify and prune on one fleet's snapshot directory.
// The sim's etcd holds no Kubernetes objects, so verify reports that the
// snapshot would rebuild an empty cluster: that output is held too.
func TestGoldenBackup(t *testing.T) {
	sf := startSim(t, simtest.Options{Bootstrap: true})
	rules := fleetRules(sf)
	dir := filepath.Join(sf.Dir, "backups") + "/"
	t.Run("etcd", func(t *testing.T) {
		assertGolden(t, "backup-etcd.txt", devata(t, nil, "backup", "etcd", "--config", sf.settings, "--to", dir), 0, rules)
	})
	t.Run("list", func(t *testing.T) {
		assertGolden(t, "backup-list.txt", devata(t, nil, "backup", "list", dir), 0, rules)
	})
	snaps, _ := filepath.Glob(filepath.Join(dir, "*.db"))
	if len(snaps) != 1 {
		t.Fatalf("want one snapshot in %s, got %v", dir, snaps)
	}
	t.Run("verify", func(t *testing.T) {
		assertGolden(t, "backup-verify.txt", devata(t, nil, "backup", "verify", "--config", sf.settings, snaps[0]), 2, rules)
	})
	t.Run("list after verify", func(t *testing.T) {
		assertGolden(t, "backup-list-verified.txt", devata(t, nil, "backup", "list", dir), 0, rules)
	})
	t.Run("prune dry run", func(t *testing.T) {
		assertGolden(t, "backup-prune.txt", devata(t, nil, "backup", "prune", dir, "--keep-last", "1"), 0, rules)
	})
}
