// Command fleetbench measures devata against its simulated fleet in separate
// processes: it builds devata, generates an inventory of N machines, starts
// `devata sim` for it, runs `devata drift` and prints wall time, CPU, peak
// RSS (of both) and calls per second. It is a benchmark, not a test: it
// asserts nothing and only reports.
//
//	go run ./internal/fleetbench -n 1000,10000 [-json results.json]
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

type result struct {
	Machines        int     `json:"machines"`
	SimStartSeconds float64 `json:"simStartSeconds"`
	SimPeakRSSMiB   float64 `json:"simPeakRSSMiB"`
	DriftSeconds    float64 `json:"driftSeconds"`
	DriftCPUSeconds float64 `json:"driftCPUSeconds"`
	DriftPeakRSSMiB float64 `json:"driftPeakRSSMiB"`
	Calls           int     `json:"calls"`
	CallsPerSecond  float64 `json:"callsPerSecond"`
	ExitCode        int     `json:"driftExitCode"`
	// FloorSeconds: one mTLS dial and one Version call per machine, same concurrency.
	FloorSeconds float64 `json:"floorSeconds"`
	// Over the first 100 machines: devata drift, and the talosctl loop operators
	// script (get machineconfig + service kubelet, one process per call).
	Drift100Seconds    float64 `json:"drift100Seconds,omitempty"`
	Talosctl100Seconds float64 `json:"talosctl100Seconds,omitempty"`
}

func main() {
	sizes := flag.String("n", "1000", "comma-separated fleet sizes")
	checks := flag.String("checks", "config,talos-version,machine-stage", "checks devata drift runs")
	concurrency := flag.Int("concurrency", 32, "devata drift --concurrency")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	withTalosctl := flag.Bool("talosctl", false, "also time the real talosctl loop over 100 machines (builds talosctl once: minutes)")
	flag.Parse()
	talosctl := ""
	if *withTalosctl {
		var err error
		talosctl, err = testenv.Talosctl(context.Background(), os.Stderr)
		check(err)
	}

	work, err := os.MkdirTemp("", "fleetbench-")
	check(err)
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "devata")
	fmt.Fprintln(os.Stderr, "building devata…")
	build := exec.Command("go", "build", "-o", bin, "./cmd/devata")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	check(build.Run())

	var results []result
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		check(err)
		r, err := measure(bin, talosctl, filepath.Join(work, s), n, *checks, *concurrency)
		check(err)
		results = append(results, r)
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "machines\tsim start\tsim peak RSS\tdrift wall\tdrift CPU\tdrift peak RSS\tcalls\tcalls/s\texit\tfloor\tdrift/floor\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%d\t%.1fs\t%.0f MiB\t%.2fs\t%.2fs\t%.0f MiB\t%d\t%.0f\t%d\t%.2fs\t%.1f×\t\n", r.Machines, r.SimStartSeconds, r.SimPeakRSSMiB, r.DriftSeconds, r.DriftCPUSeconds, r.DriftPeakRSSMiB, r.Calls, r.CallsPerSecond, r.ExitCode, r.FloorSeconds, r.DriftSeconds/r.FloorSeconds)
	}
	tw.Flush()
	for _, r := range results {
		if r.Talosctl100Seconds > 0 {
			fmt.Printf("100 machines (of %d): talosctl loop %.2fs, devata drift %.2fs: devata is %.1f× faster\n", r.Machines, r.Talosctl100Seconds, r.Drift100Seconds, r.Talosctl100Seconds/r.Drift100Seconds)
		}
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(results, "", "  ")
		check(os.WriteFile(*jsonOut, append(data, '\n'), 0o644))
	}
}

func measure(bin, talosctl, dir string, n int, checks string, concurrency int) (result, error) {
	r := result{Machines: n}
	if err := os.MkdirAll(filepath.Join(dir, "sim"), 0o700); err != nil {
		return r, err
	}
	if err := writeInventory(dir, n); err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "%d machines: starting devata sim…\n", n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sim := exec.CommandContext(ctx, bin, "sim", "-i", filepath.Join(dir, "inventory.yaml"), "--dir", filepath.Join(dir, "sim"))
	sim.Env = cleanEnv()
	stdout, err := sim.StdoutPipe()
	if err != nil {
		return r, err
	}
	var simErr strings.Builder
	sim.Stderr = &simErr
	start := time.Now()
	if err := sim.Start(); err != nil {
		return r, err
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "serving until interrupted") {
				close(ready)
				break
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case <-ready:
	case <-time.After(10 * time.Minute):
		return r, fmt.Errorf("devata sim did not start: %s", simErr.String())
	}
	r.SimStartSeconds = time.Since(start).Seconds()

	fmt.Fprintf(os.Stderr, "%d machines: devata drift…\n", n)
	drift := exec.Command(bin, "drift", "--config", filepath.Join(dir, "sim", "devata.yaml"), "--checks", checks, "--concurrency", strconv.Itoa(concurrency), "-o", "json")
	drift.Env = cleanEnv()
	drift.Stdout = io.Discard
	var driftErr strings.Builder
	drift.Stderr = &driftErr
	start = time.Now()
	err = drift.Run()
	r.DriftSeconds = time.Since(start).Seconds()
	if drift.ProcessState == nil {
		return r, fmt.Errorf("devata drift: %v", err)
	}
	r.ExitCode = drift.ProcessState.ExitCode()
	if ru, ok := drift.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.DriftPeakRSSMiB = float64(ru.Maxrss) / 1024
		r.DriftCPUSeconds = tv(ru.Utime) + tv(ru.Stime)
	}
	fmt.Fprintf(os.Stderr, "%d machines: floor (dial + Version each)…\n", n)
	if r.FloorSeconds, err = floor(filepath.Join(dir, "sim"), filepath.Join(dir, "inventory.yaml"), concurrency); err != nil {
		return r, err
	}
	if talosctl != "" {
		fmt.Fprintf(os.Stderr, "%d machines: devata drift and the talosctl loop over 100 machines…\n", n)
		if r.Drift100Seconds, r.Talosctl100Seconds, err = hundred(bin, talosctl, dir, checks, concurrency); err != nil {
			return r, err
		}
	}
	r.SimPeakRSSMiB = peakRSS(sim.Process.Pid)
	_ = sim.Process.Signal(os.Interrupt)
	_ = sim.Wait()
	if _, err := fmt.Sscanf(after(simErr.String(), "sim: stopped after serving "), "%d", &r.Calls); err == nil && r.DriftSeconds > 0 {
		r.CallsPerSecond = float64(r.Calls) / r.DriftSeconds
	}
	if r.ExitCode != 0 {
		fmt.Fprintf(os.Stderr, "devata drift exited %d: %s\n", r.ExitCode, lastLines(driftErr.String(), 5))
	}
	return r, nil
}

// floor dials every machine over mTLS and asks its Version once, with the
// same concurrency as devata drift: what no drift check can go below.
func floor(simDir, invPath string, concurrency int) (float64, error) {
	var settings struct {
		Dial map[string]string `yaml:"dial"`
	}
	data, err := os.ReadFile(filepath.Join(simDir, "devata.yaml"))
	if err != nil {
		return 0, err
	}
	if err := yaml.Unmarshal(data, &settings); err != nil {
		return 0, err
	}
	tc, err := machines.LoadTalosconfig(filepath.Join(simDir, "talosconfig"))
	if err != nil {
		return 0, err
	}
	d, err := machines.NewDialer(tc, settings.Dial)
	if err != nil {
		return 0, err
	}
	inv, err := inventory.Load(invPath)
	if err != nil {
		return 0, err
	}
	var ms []*inventory.Machine
	for i := range inv.Machines {
		ms = append(ms, &inv.Machines[i])
	}
	start := time.Now()
	err = machines.ForEach(context.Background(), ms, concurrency, 30*time.Second, func(ctx context.Context, m *inventory.Machine) error {
		c, err := d.Client(ctx, m)
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Version(ctx)
		return err
	})
	return time.Since(start).Seconds(), err
}

// hundred times devata drift over the first 100 machines, and the loop an
// operator scripts today: talosctl get machineconfig and service kubelet, one
// process per call, machine after machine.
func hundred(bin, talosctl, dir, checks string, concurrency int) (float64, float64, error) {
	var settings struct {
		Dial map[string]string `yaml:"dial"`
	}
	data, err := os.ReadFile(filepath.Join(dir, "sim", "devata.yaml"))
	if err != nil {
		return 0, 0, err
	}
	if err := yaml.Unmarshal(data, &settings); err != nil {
		return 0, 0, err
	}
	var names []string
	for i := 0; i < 100 && i < len(settings.Dial); i++ {
		names = append(names, fmt.Sprintf("m-%05d", i))
	}
	drift := exec.Command(bin, "drift", "--config", filepath.Join(dir, "sim", "devata.yaml"), "--checks", checks, "--concurrency", strconv.Itoa(concurrency), "--machines", strings.Join(names, ","), "-o", "json")
	drift.Env, drift.Stdout = cleanEnv(), io.Discard
	start := time.Now()
	_ = drift.Run()
	driftSeconds := time.Since(start).Seconds()

	tc := filepath.Join(dir, "sim", "talosconfig")
	start = time.Now()
	for _, name := range names {
		for _, args := range [][]string{{"get", "machineconfig"}, {"service", "kubelet"}} {
			cmd := exec.Command(talosctl, append([]string{"--talosconfig", tc, "-e", settings.Dial[name], "-n", name}, args...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return 0, 0, fmt.Errorf("talosctl %s: %v: %s", strings.Join(cmd.Args[1:], " "), err, out)
			}
		}
	}
	return driftSeconds, time.Since(start).Seconds(), nil
}

func writeInventory(dir string, n int) error {
	var b strings.Builder
	b.WriteString("apiVersion: devata.dev/v1alpha1\nkind: Inventory\ncluster:\n  name: bench\n  endpoint: https://10.0.0.10:6443\nmachines:\n")
	for i := range n {
		role := "worker"
		if i < 3 {
			role = "controlplane"
		}
		fmt.Fprintf(&b, "  - {name: m-%05d, role: %s, address: 10.%d.%d.%d, installDisk: /dev/sda}\n", i, role, 1+i/65536, i/256%256, i%256)
	}
	if err := os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(b.String()), 0o644); err != nil {
		return err
	}
	secrets, err := os.ReadFile("bootstrap/testdata/secrets.yaml")
	if err != nil {
		return fmt.Errorf("run fleetbench from the repository root: %w", err)
	}
	return os.WriteFile(filepath.Join(dir, "secrets.yaml"), secrets, 0o600)
}

// cleanEnv keeps the caller's DEVATA_*/TALOSCONFIG/KUBECONFIG out of the runs.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEVATA_") && !strings.HasPrefix(kv, "TALOSCONFIG=") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			out = append(out, kv)
		}
	}
	return append(out, "XDG_CONFIG_HOME=/nonexistent")
}

func peakRSS(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			kb, _ := strconv.Atoi(strings.Fields(line)[1])
			return float64(kb) / 1024
		}
	}
	return 0
}

func tv(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }

func after(s, prefix string) string {
	if i := strings.Index(s, prefix); i >= 0 {
		return s[i+len(prefix):]
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleetbench:", err)
		os.Exit(1)
	}
}
