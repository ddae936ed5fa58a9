package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/render"
	"devata.dev/devata/talosapi"
)

// reconcileRun edits the applied config of driftPercent of the workers behind
// devata's back (through the sim's faults file: each gets its desired config
// plus a node label, which Talos applies without a reboot), waits until the
// sim serves the edits, runs `devata reconcile --once` and checks that every
// edited machine runs its desired config again.
func reconcileRun(o options, s *simFleet, dir string, n int) (*Reconcile, error) {
	inv, err := inventory.Load(s.inventory())
	if err != nil {
		return nil, err
	}
	bundle, err := render.LoadSecrets(filepath.Join(dir, "secrets.yaml"))
	if err != nil {
		return nil, err
	}
	rd, err := render.NewRenderer(inv, bundle)
	if err != nil {
		return nil, err
	}
	drifted, err := pickDrifted(inv, o.driftPercent, n)
	if err != nil {
		return nil, err
	}
	d, err := s.dialer()
	if err != nil {
		return nil, err
	}
	desired, err := hashes(d, drifted, o.concurrency)
	if err != nil {
		return nil, fmt.Errorf("before the drift: %w", err)
	}

	faults, err := renderDrifted(rd, filepath.Join(dir, "drifted"), drifted)
	if err != nil {
		return nil, err
	}
	if err := writeFaults(s, faults); err != nil {
		return nil, err
	}
	if err := waitFor(d, drifted, o.concurrency, func(name string, h [32]byte) bool { return h != desired[name] }, time.Minute+time.Duration(n)*time.Millisecond); err != nil {
		return nil, fmt.Errorf("the sim did not serve the drifted configs: %w (sim: %s)", err, lastLines(s.procs[0].err.String(), 3))
	}

	return runReconcile(o, s, d, drifted, desired), nil
}

// pickDrifted chooses the workers whose configs reconcileRun edits.
func pickDrifted(inv *inventory.Inventory, driftPercent float64, n int) ([]*inventory.Machine, error) {
	// every 1/p-th machine from the middle of the first stride: all workers
	// (the first three are the control planes)
	stride := max(1, int(100/driftPercent))
	var drifted []*inventory.Machine
	for i := stride / 2; i < n; i += stride {
		if m := &inv.Machines[i]; !m.IsControlPlane() {
			drifted = append(drifted, m)
		}
	}
	if len(drifted) == 0 {
		return nil, fmt.Errorf("-drift-percent %g drifts no worker of %d machines", driftPercent, n)
	}
	return drifted, nil
}

// renderDrifted writes each drifted machine's edited config (its desired
// config plus a node label) into editDir and returns, per machine, its line
// in its sim's faults file.
func renderDrifted(rd *render.Renderer, editDir string, drifted []*inventory.Machine) (map[string]string, error) {
	if err := os.MkdirAll(editDir, 0o700); err != nil {
		return nil, err
	}
	faults := map[string]string{} // machine → its line in its sim's faults file
	for _, m := range drifted {
		edited := *m
		edited.Labels = map[string]string{"fleetbench.devata.dev/drifted": "true"}
		maps.Copy(edited.Labels, m.Labels)
		out, err := rd.Render(&edited)
		if err != nil {
			return nil, err
		}
		file := filepath.Join(editDir, m.Name+".yaml")
		if err := os.WriteFile(file, out.Config, 0o600); err != nil {
			return nil, err
		}
		faults[m.Name] = fmt.Sprintf("%s: {driftedConfigFile: %s}\n", m.Name, file)
	}
	return faults, nil
}

// writeFaults gives every sim the faults-file lines of the machines it serves.
func writeFaults(s *simFleet, faults map[string]string) error {
	for _, p := range s.procs {
		var b strings.Builder
		for _, name := range p.machines {
			b.WriteString(faults[name])
		}
		if b.Len() == 0 {
			continue
		}
		// each sim watches DIR/faults.yaml; renamed into place, it is read whole
		tmp := filepath.Join(p.dir, ".faults.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(b.String()), 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(p.dir, "faults.yaml")); err != nil {
			return err
		}
	}
	return nil
}

// runReconcile runs `devata reconcile --once`, counts the drifted machines'
// outcomes from its output and checks that every one runs its desired config
// again.
func runReconcile(o options, s *simFleet, d *talosapi.Dialer, drifted []*inventory.Machine, desired map[string][32]byte) *Reconcile {
	rec := &Reconcile{Drifted: len(drifted), Outcomes: map[string]int{}}
	rec.Flags = []string{"--once", "--checks", o.checks, "--concurrency", strconv.Itoa(o.concurrency),
		"--max-unavailable", strconv.Itoa(o.maxUnavailable), "--write-rate", strconv.FormatFloat(o.writeRate, 'g', -1, 64)}
	var stdout strings.Builder
	var stderr string
	rec.Run, stderr = runDevata(o.bin, s, append([]string{"reconcile", "--config", s.config()}, rec.Flags...), &stdout)
	if rec.ExitCode != 0 {
		fmt.Fprintf(os.Stderr, "devata reconcile exited %d: %s\n", rec.ExitCode, lastLines(stderr, 5))
	}
	names := map[string]bool{}
	for _, m := range drifted {
		names[m.Name] = true
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && names[f[0]] {
			rec.Outcomes[f[1]]++
		}
	}
	err := waitFor(d, drifted, o.concurrency, func(name string, h [32]byte) bool { return h == desired[name] }, 0)
	rec.Converged = err == nil
	if err != nil {
		fmt.Fprintf(os.Stderr, "not converged: %v\n", err)
	}
	return rec
}

// hashes reads the hash of each machine's active config.
func hashes(d *talosapi.Dialer, ms []*inventory.Machine, concurrency int) (map[string][32]byte, error) {
	var mu sync.Mutex
	out := map[string][32]byte{}
	err := talosapi.ForEach(context.Background(), ms, concurrency, 30*time.Second, func(ctx context.Context, m *inventory.Machine) error {
		obs := talosapi.Observe(ctx, d, m)
		if obs.Err != nil || obs.ConfigErr != nil {
			return errors.Join(obs.Err, obs.ConfigErr)
		}
		mu.Lock()
		out[m.Name] = obs.ActiveHash
		mu.Unlock()
		return nil
	})
	return out, err
}

// waitFor polls the machines' active configs until ok holds for every one,
// or within (0: look once).
func waitFor(d *talosapi.Dialer, ms []*inventory.Machine, concurrency int, ok func(string, [32]byte) bool, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		hs, err := hashes(d, ms, concurrency)
		var bad []string
		for _, m := range ms {
			if !ok(m.Name, hs[m.Name]) {
				bad = append(bad, m.Name)
			}
		}
		if err == nil && len(bad) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return err
			}
			return fmt.Errorf("%d of %d machines, e.g. %s", len(bad), len(ms), bad[0])
		}
		time.Sleep(500 * time.Millisecond)
	}
}
