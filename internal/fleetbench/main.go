// Command fleetbench measures devata against its simulated fleet in separate
// processes: it builds devata, generates an inventory of N machines, starts
// `devata sim` for it, runs `devata drift`, then injects drift into 1% of the
// machines and runs a converging `devata reconcile --once`, and prints wall
// time, CPU, peak RSS and calls per second beside two baselines (a bare mTLS
// floor and the real talosctl loop). It is a benchmark, not a test: it
// asserts nothing and only reports (main_test.go checks the harness itself
// on a 30-machine fleet).
//
//	go run ./internal/fleetbench -n 1000,10000 [-talosctl] [-json results.json]
//	go run ./internal/fleetbench -n 100000 -large [-stream] -json results-100k.json
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"gopkg.in/yaml.v3"

	"devata.dev/devata/bootstrap"
	"devata.dev/devata/internal/testenv"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
)

// largeFleet is the size above which -large must be given: such a run takes
// many minutes and gigabytes (the sim holds every machine's parsed config).
const largeFleet = 20000

// Report is what -json writes.
type Report struct {
	Host    Host     `json:"host"`
	Results []Result `json:"results"`
}

// Host says where the figures were taken.
type Host struct {
	CPUs        int       `json:"cpus"`
	MemTotalMiB float64   `json:"memTotalMiB"`
	GoVersion   string    `json:"goVersion"`
	Started     time.Time `json:"started"`
}

// Run is one measured process (or, for the floor, one in-process loop).
type Run struct {
	Seconds    float64 `json:"seconds"`
	CPUSeconds float64 `json:"cpuSeconds,omitempty"`
	PeakRSSMiB float64 `json:"peakRSSMiB,omitempty"`
	ExitCode   int     `json:"exitCode"`
	// SimCPUSeconds is what the sim spent meanwhile, on the same cores.
	SimCPUSeconds float64 `json:"simCPUSeconds,omitempty"`
	// LoopbackBytes is what crossed the loopback interface meanwhile, both
	// directions, TCP/IP headers included (and anything else using loopback).
	LoopbackBytes int64 `json:"loopbackBytes,omitempty"`
	// Load averages (1, 5, 15 min) when the run started and ended: a busy
	// machine makes wall times noisy.
	LoadStart [3]float64 `json:"loadAverageStart"`
	LoadEnd   [3]float64 `json:"loadAverageEnd"`
}

// Reconcile is the converging `devata reconcile --once` after drift was
// injected behind devata's back.
type Reconcile struct {
	Run
	Drifted   int            `json:"driftedMachines"`
	Outcomes  map[string]int `json:"outcomes"`
	Converged bool           `json:"converged"` // every drifted machine runs its desired config again
	Flags     []string       `json:"flags"`
}

// Result is one fleet size.
type Result struct {
	Machines        int      `json:"machines"`
	Concurrency     int      `json:"concurrency"`
	SimProcesses    int      `json:"simProcesses"`
	SimStartSeconds float64  `json:"simStartSeconds"`
	SimPeakRSSMiB   float64  `json:"simPeakRSSMiB"`
	Drift           Run      `json:"drift"`
	DriftFlags      []string `json:"driftFlags"`
	Calls           int      `json:"driftCalls"`
	CallsPerSecond  float64  `json:"driftCallsPerSecond"`
	// SimCallsTotal is every call the sim served, over all the runs.
	SimCallsTotal int `json:"simCallsTotal"`
	// Floor: one mTLS dial and one Version call per machine, same concurrency.
	Floor        Run     `json:"floor"`
	DriftOnFloor float64 `json:"driftOnFloor"`
	// Over the first 100 machines: devata drift, and the talosctl loop operators
	// script (get machineconfig + service kubelet, one process per call).
	Drift100      *Run       `json:"drift100,omitempty"`
	Talosctl100   *Run       `json:"talosctl100,omitempty"`
	TalosctlRatio float64    `json:"talosctlOnDrift100,omitempty"`
	Reconcile     *Reconcile `json:"reconcile,omitempty"`
}

type options struct {
	bin, talosctl  string
	checks         string
	concurrency    int
	driftPercent   float64
	maxUnavailable int
	writeRate      float64
	perSim         int
	stream         bool
}

func main() {
	sizes := flag.String("n", "1000", "comma-separated fleet sizes")
	large := flag.Bool("large", false, fmt.Sprintf("allow sizes above %d (many minutes, and ~1 GiB of sim memory per 10,000 machines)", largeFleet))
	checks := flag.String("checks", "config,talos-version,machine-stage", "checks devata drift and reconcile run")
	concurrency := flag.Int("concurrency", 32, "devata --concurrency")
	jsonOut := flag.String("json", "", "also write the results as JSON to this file")
	withTalosctl := flag.Bool("talosctl", false, "also time the real talosctl loop over 100 machines (builds talosctl once: minutes)")
	driftPercent := flag.Float64("drift-percent", 1, "share of machines whose config is edited behind devata's back before `devata reconcile --once` (0: skip reconcile)")
	maxUnavailable := flag.Int("max-unavailable", 0, "devata reconcile --max-unavailable (default: -concurrency)")
	stream := flag.Bool("stream", false, "devata drift -o json --stream: write results as machines finish instead of holding the report (for the largest fleets)")
	perSim := flag.Int("per-sim", simCapacity(), "most machines one sim process serves (default: from the open-files limit, a listener per machine)")
	writeRate := flag.Float64("write-rate", 0, "devata reconcile --write-rate (0: unlimited; the benchmark measures devata, not the rollout policy)")
	flag.Parse()

	var ns []int
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		check(err)
		if n > largeFleet && !*large {
			check(fmt.Errorf("-n %d: sizes above %d take many minutes and gigabytes; add -large to run them", n, largeFleet))
		}
		ns = append(ns, n)
	}
	o := options{stream: *stream, perSim: max(*perSim, 100), checks: *checks, concurrency: *concurrency, driftPercent: *driftPercent, maxUnavailable: *maxUnavailable, writeRate: *writeRate}
	if o.maxUnavailable < 1 {
		o.maxUnavailable = o.concurrency
	}
	if *withTalosctl {
		var err error
		o.talosctl, err = testenv.Talosctl(context.Background(), os.Stderr)
		check(err)
	}

	work, err := os.MkdirTemp("", "fleetbench-")
	check(err)
	defer os.RemoveAll(work)
	o.bin = filepath.Join(work, "devata")
	fmt.Fprintln(os.Stderr, "building devata…")
	build := exec.Command("go", "build", "-o", o.bin, "./cmd/devata")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	check(build.Run())

	rep := Report{Host: Host{CPUs: runtime.NumCPU(), MemTotalMiB: memTotalMiB(), GoVersion: runtime.Version(), Started: time.Now().UTC().Truncate(time.Second)}}
	for _, n := range ns {
		r, err := measure(o, filepath.Join(work, strconv.Itoa(n)), n)
		check(err)
		rep.Results = append(rep.Results, r)
		// the next size needs the memory and the ports back
		check(os.RemoveAll(filepath.Join(work, strconv.Itoa(n))))
	}
	printTable(os.Stdout, rep)
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(rep, "", "  ")
		check(os.WriteFile(*jsonOut, append(data, '\n'), 0o644))
	}
}

func printTable(w io.Writer, rep Report) {
	fmt.Fprintf(w, "%d CPUs, %.0f MiB; load averages (1 min) at the start and end of each run in brackets\n\n", rep.Host.CPUs, rep.Host.MemTotalMiB)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "machines\tsims\tsim start\tsim RSS\tdrift wall\tdrift CPU\tsim CPU\tdrift RSS\tcalls/s\tKiB/machine\texit\tfloor\tdrift/floor\tload\t")
	for _, r := range rep.Results {
		d := r.Drift
		fmt.Fprintf(tw, "%d\t%d\t%.1fs\t%.0f MiB\t%.2fs\t%.2fs\t%.2fs\t%.0f MiB\t%.0f\t%.1f\t%d\t%.2fs\t%.2f×\t%s\t\n",
			r.Machines, r.SimProcesses, r.SimStartSeconds, r.SimPeakRSSMiB, d.Seconds, d.CPUSeconds, d.SimCPUSeconds, d.PeakRSSMiB, r.CallsPerSecond, float64(d.LoopbackBytes)/1024/float64(r.Machines), d.ExitCode,
			r.Floor.Seconds, r.DriftOnFloor, loads(d))
	}
	tw.Flush()
	var rec, tal []Result
	for _, r := range rep.Results {
		if r.Reconcile != nil {
			rec = append(rec, r)
		}
		if r.Talosctl100 != nil {
			tal = append(tal, r)
		}
	}
	if len(rec) > 0 {
		fmt.Fprintln(w, "\nreconcile --once after drifting some machines' configs behind devata's back:")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "machines\tdrifted\twall\tCPU\tsim CPU\tpeak RSS\texit\tconverged\toutcomes\tload\t")
		for _, r := range rec {
			c := r.Reconcile
			fmt.Fprintf(tw, "%d\t%d\t%.2fs\t%.2fs\t%.2fs\t%.0f MiB\t%d\t%v\t%s\t%s\t\n", r.Machines, c.Drifted, c.Seconds, c.CPUSeconds, c.SimCPUSeconds, c.PeakRSSMiB, c.ExitCode, c.Converged, outcomes(c.Outcomes), loads(c.Run))
		}
		tw.Flush()
		fmt.Fprintf(w, "(flags: %s)\n", strings.Join(rec[0].Reconcile.Flags, " "))
	}
	for _, r := range tal {
		fmt.Fprintf(w, "\n100 machines (of %d): talosctl loop %.2fs, devata drift %.2fs: devata is %.1f× faster %s\n", r.Machines, r.Talosctl100.Seconds, r.Drift100.Seconds, r.TalosctlRatio, loads(*r.Talosctl100))
	}
}

func loads(r Run) string { return fmt.Sprintf("[%.2f→%.2f]", r.LoadStart[0], r.LoadEnd[0]) }

func outcomes(m map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// simFleet is the `devata sim` processes serving one fleet: one process when
// the fleet fits in the open-files limit (a listener per machine), else
// several, each serving part of the machines. Every machine listens on its
// own inventory address (127.x.y.z) and the Talos API port, as a real fleet
// does, so devata runs with no dial overrides.
type simFleet struct {
	procs []*simProc
	// dir holds devata.yaml, the settings every devata run uses: the whole
	// inventory and the first part's talosconfig.
	dir string
	// endpoints maps every machine to its address:port (for talosctl).
	endpoints map[string]string
}

type simProc struct {
	cmd      *exec.Cmd
	err      strings.Builder
	dir      string
	machines []string // the workers it serves (every part also serves the control planes)
	ready    chan struct{}
	exited   chan struct{}
}

func (f *simFleet) cpu() float64 {
	var sum float64
	for _, p := range f.procs {
		sum += procCPU(p.cmd.Process.Pid)
	}
	return sum
}

func (f *simFleet) peakRSS() float64 {
	var sum float64
	for _, p := range f.procs {
		sum += peakRSS(p.cmd.Process.Pid)
	}
	return sum
}

func (f *simFleet) config() string      { return filepath.Join(f.dir, "devata.yaml") }
func (f *simFleet) inventory() string   { return filepath.Join(f.dir, "inventory.yaml") }
func (f *simFleet) talosconfig() string { return filepath.Join(f.procs[0].dir, "talosconfig") }

// stop interrupts every sim and returns the calls they served in all.
func (f *simFleet) stop() int {
	total := 0
	for _, p := range f.procs {
		_ = p.cmd.Process.Signal(os.Interrupt)
	}
	for _, p := range f.procs {
		select {
		case <-p.exited:
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		var calls int
		if _, err := fmt.Sscanf(after(p.err.String(), "sim: stopped after serving "), "%d", &calls); err == nil {
			total += calls
		}
	}
	return total
}

func (f *simFleet) kill() {
	for _, p := range f.procs {
		_ = p.cmd.Process.Kill()
	}
}

// startSims starts the sims for the inventory written in dir and waits
// until every one serves.
func startSims(bin, dir string, parts [][]string, endpoints map[string]string) (*simFleet, error) {
	f := &simFleet{dir: dir, endpoints: endpoints}
	for k, part := range parts {
		pdir := dir
		if len(parts) > 1 {
			pdir = filepath.Join(dir, fmt.Sprintf("part-%d", k))
		}
		p := &simProc{dir: filepath.Join(pdir, "sim"), machines: part, ready: make(chan struct{}), exited: make(chan struct{})}
		args := []string{"sim", "-i", filepath.Join(pdir, "inventory.yaml"), "--dir", p.dir, "--inventory-addresses"}
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			return f, err
		}
		p.cmd = exec.Command(bin, args...)
		p.cmd.Env = cleanEnv()
		stdout, err := p.cmd.StdoutPipe()
		if err != nil {
			return f, err
		}
		p.cmd.Stderr = &p.err
		if err := p.cmd.Start(); err != nil {
			return f, err
		}
		f.procs = append(f.procs, p)
		go func() {
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if strings.Contains(sc.Text(), "serving until interrupted") {
					close(p.ready)
					break
				}
			}
			_, _ = io.Copy(io.Discard, stdout)
		}()
		go func() { _ = p.cmd.Wait(); close(p.exited) }()
	}
	timeout := time.After(30 * time.Minute)
	for _, p := range f.procs {
		select {
		case <-p.ready:
		case <-p.exited:
			return f, fmt.Errorf("devata sim %s exited before serving: %s", p.dir, lastLines(p.err.String(), 10))
		case <-timeout:
			return f, fmt.Errorf("devata sim %s did not start in 30 minutes: %s", p.dir, lastLines(p.err.String(), 10))
		}
	}
	// The settings devata runs with: no dial overrides, the machines are
	// where the inventory says.
	data, err := yaml.Marshal(map[string]any{"inventory": f.inventory(), "talosconfig": f.talosconfig(), "simulated": true})
	if err != nil {
		return f, err
	}
	return f, os.WriteFile(f.config(), data, 0o600)
}

func measure(o options, dir string, n int) (Result, error) {
	r := Result{Machines: n, Concurrency: o.concurrency}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return r, err
	}
	parts, endpoints, err := writeInventory(dir, n, o.perSim)
	if err != nil {
		return r, err
	}
	fmt.Fprintf(os.Stderr, "%d machines: starting devata sim (%d process(es))…\n", n, len(parts))
	start := time.Now()
	s, err := startSims(o.bin, dir, parts, endpoints)
	defer s.kill()
	if err != nil {
		return r, err
	}
	r.SimStartSeconds = time.Since(start).Seconds()
	r.SimProcesses = len(parts)

	fmt.Fprintf(os.Stderr, "%d machines: devata drift…\n", n)
	driftArgs := []string{"drift", "--config", s.config(), "--checks", o.checks, "--concurrency", strconv.Itoa(o.concurrency), "-o", "json"}
	if o.stream {
		driftArgs = append(driftArgs, "--stream")
	}
	r.DriftFlags = driftArgs[3:]
	var stderr string
	r.Drift, stderr = runDevata(o.bin, s, driftArgs, io.Discard)
	if r.Drift.ExitCode != 0 {
		fmt.Fprintf(os.Stderr, "devata drift exited %d: %s\n", r.Drift.ExitCode, lastLines(stderr, 5))
	}
	r.Calls = driftCalls(n)
	r.CallsPerSecond = float64(r.Calls) / r.Drift.Seconds

	fmt.Fprintf(os.Stderr, "%d machines: floor (dial + Version each)…\n", n)
	if r.Floor, err = floor(s, o.concurrency); err != nil {
		return r, err
	}
	r.DriftOnFloor = r.Drift.Seconds / r.Floor.Seconds
	if o.talosctl != "" {
		fmt.Fprintf(os.Stderr, "%d machines: devata drift and the talosctl loop over 100 machines…\n", n)
		d, t, err := hundred(o, s)
		if err != nil {
			return r, err
		}
		r.Drift100, r.Talosctl100, r.TalosctlRatio = &d, &t, t.Seconds/d.Seconds
	}
	if o.driftPercent > 0 {
		fmt.Fprintf(os.Stderr, "%d machines: drift %.3g%% of the configs behind devata's back, then devata reconcile --once…\n", n, o.driftPercent)
		rec, err := reconcileRun(o, s, dir, n)
		if err != nil {
			return r, err
		}
		r.Reconcile = rec
	}
	r.SimPeakRSSMiB = s.peakRSS()
	r.SimCallsTotal = s.stop()
	return r, nil
}

// driftCalls is the number of Talos API calls one drift pass makes with the
// benchmark's checks: Version, both MachineConfigs, MachineStatus and the
// kubelet service per machine, and the etcd service, members and status on
// each of the three control planes (machines.ObserveWith). The sim counts only a
// total when it stops, over every run; a drift-only run served exactly this.
func driftCalls(n int) int { return 5*n + 3*min(n, 3) }

// runDevata runs one devata command to its end and measures it.
func runDevata(bin string, s *simFleet, args []string, stdout io.Writer) (Run, string) {
	cmd := exec.Command(bin, args...)
	cmd.Env, cmd.Stdout = cleanEnv(), stdout
	var stderr strings.Builder
	cmd.Stderr = &stderr
	r := Run{LoadStart: loadAvg()}
	simBefore, loBefore := s.cpu(), loopbackBytes()
	start := time.Now()
	err := cmd.Run()
	r.Seconds = time.Since(start).Seconds()
	r.SimCPUSeconds = s.cpu() - simBefore
	r.LoopbackBytes = loopbackBytes() - loBefore
	r.LoadEnd = loadAvg()
	if cmd.ProcessState == nil {
		r.ExitCode = -1
		return r, fmt.Sprintf("%v\n%s", err, stderr.String())
	}
	r.ExitCode = cmd.ProcessState.ExitCode()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.PeakRSSMiB = float64(ru.Maxrss) / 1024
		r.CPUSeconds = tv(ru.Utime) + tv(ru.Stime)
	}
	return r, stderr.String()
}

func (f *simFleet) dialer() (*machines.Dialer, error) {
	tc, err := machines.LoadTalosconfig(f.talosconfig())
	if err != nil {
		return nil, err
	}
	return machines.NewDialer(tc, nil)
}

// floor dials every machine over mTLS and asks its Version once, with the
// same concurrency as devata drift: what no drift check can go below.
func floor(s *simFleet, concurrency int) (Run, error) {
	r := Run{LoadStart: loadAvg()}
	d, err := s.dialer()
	if err != nil {
		return r, err
	}
	inv, err := inventory.Load(s.inventory())
	if err != nil {
		return r, err
	}
	var ms []*inventory.Machine
	for i := range inv.Machines {
		ms = append(ms, &inv.Machines[i])
	}
	simBefore, cpuBefore, loBefore := s.cpu(), selfCPU(), loopbackBytes()
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
	r.Seconds = time.Since(start).Seconds()
	r.CPUSeconds = selfCPU() - cpuBefore
	r.SimCPUSeconds = s.cpu() - simBefore
	r.LoopbackBytes = loopbackBytes() - loBefore
	r.LoadEnd = loadAvg()
	if err != nil {
		r.ExitCode = 1
	}
	return r, err
}

// hundred times devata drift over the first 100 machines, and the loop an
// operator scripts today: talosctl get machineconfig and service kubelet, one
// process per call, machine after machine.
func hundred(o options, s *simFleet) (Run, Run, error) {
	var names []string
	for i := 0; i < 100 && i < len(s.endpoints); i++ {
		names = append(names, fmt.Sprintf("m-%05d", i))
	}
	d, _ := runDevata(o.bin, s, []string{"drift", "--config", s.config(), "--checks", o.checks, "--concurrency", strconv.Itoa(o.concurrency), "--machines", strings.Join(names, ","), "-o", "json"}, io.Discard)

	tc := s.talosconfig()
	t := Run{LoadStart: loadAvg()}
	simBefore := s.cpu()
	start := time.Now()
	for _, name := range names {
		for _, args := range [][]string{{"get", "machineconfig"}, {"service", "kubelet"}} {
			cmd := exec.Command(o.talosctl, append([]string{"--talosconfig", tc, "-e", s.endpoints[name], "-n", name}, args...)...)
			if out, err := cmd.CombinedOutput(); err != nil {
				return d, t, fmt.Errorf("talosctl %s: %v: %s", strings.Join(cmd.Args[1:], " "), err, out)
			}
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				t.CPUSeconds += tv(ru.Utime) + tv(ru.Stime)
				t.PeakRSSMiB = max(t.PeakRSSMiB, float64(ru.Maxrss)/1024)
			}
		}
	}
	t.Seconds = time.Since(start).Seconds()
	t.SimCPUSeconds = s.cpu() - simBefore
	t.LoadEnd = loadAvg()
	return d, t, nil
}

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
	bundle, err := bootstrap.LoadSecrets(filepath.Join(dir, "secrets.yaml"))
	if err != nil {
		return nil, err
	}
	rd, err := bootstrap.NewRenderer(inv, bundle)
	if err != nil {
		return nil, err
	}
	// every 1/p-th machine from the middle of the first stride: all workers
	// (the first three are the control planes)
	stride := max(1, int(100/o.driftPercent))
	var drifted []*inventory.Machine
	for i := stride / 2; i < n; i += stride {
		if m := &inv.Machines[i]; !m.IsControlPlane() {
			drifted = append(drifted, m)
		}
	}
	if len(drifted) == 0 {
		return nil, fmt.Errorf("-drift-percent %g drifts no worker of %d machines", o.driftPercent, n)
	}
	d, err := s.dialer()
	if err != nil {
		return nil, err
	}
	desired, err := hashes(d, drifted, o.concurrency)
	if err != nil {
		return nil, fmt.Errorf("before the drift: %w", err)
	}

	editDir := filepath.Join(dir, "drifted")
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
			return nil, err
		}
		if err := os.Rename(tmp, filepath.Join(p.dir, "faults.yaml")); err != nil {
			return nil, err
		}
	}
	if err := waitFor(d, drifted, o.concurrency, func(name string, h [32]byte) bool { return h != desired[name] }, time.Minute+time.Duration(n)*time.Millisecond); err != nil {
		return nil, fmt.Errorf("the sim did not serve the drifted configs: %w (sim: %s)", err, lastLines(s.procs[0].err.String(), 3))
	}

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
	err = waitFor(d, drifted, o.concurrency, func(name string, h [32]byte) bool { return h == desired[name] }, 0)
	rec.Converged = err == nil
	if err != nil {
		fmt.Fprintf(os.Stderr, "not converged: %v\n", err)
	}
	return rec, nil
}

// hashes reads the hash of each machine's active config.
func hashes(d *machines.Dialer, ms []*inventory.Machine, concurrency int) (map[string][32]byte, error) {
	var mu sync.Mutex
	out := map[string][32]byte{}
	err := machines.ForEach(context.Background(), ms, concurrency, 30*time.Second, func(ctx context.Context, m *inventory.Machine) error {
		obs := machines.Observe(ctx, d, m)
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
func waitFor(d *machines.Dialer, ms []*inventory.Machine, concurrency int, ok func(string, [32]byte) bool, within time.Duration) error {
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

// writeInventory writes the fleet's inventory and secrets into dir and
// returns the workers each sim serves and every machine's endpoint. Machine i
// is at 127.(1+i/65536).(i/256%256).(i%256), port 50000. When the fleet needs
// several sims, each gets an inventory of its own in dir/part-K: its part of
// the workers, and the control planes (an inventory needs one) at addresses
// of that part's own (127.254.K.x) which devata never dials. A control
// plane's address is in no rendered config, only in the talosconfig, so every
// machine renders exactly as in the whole inventory.
func writeInventory(dir string, n, perSim int) ([][]string, map[string]string, error) {
	secrets, err := os.ReadFile("bootstrap/testdata/secrets.yaml")
	if err != nil {
		return nil, nil, fmt.Errorf("run fleetbench from the repository root: %w", err)
	}
	const header = "apiVersion: devata.dev/v1alpha1\nkind: Inventory\ncluster:\n  name: bench\n  endpoint: https://10.0.0.10:6443\nmachines:\n"
	const controlPlanes = 3
	address := func(i int) string { return fmt.Sprintf("127.%d.%d.%d", 1+i/65536, i/256%256, i%256) }
	line := func(i int, addr string) string {
		role := "worker"
		if i < controlPlanes {
			role = "controlplane"
		}
		return fmt.Sprintf("  - {name: m-%05d, role: %s, address: %s, installDisk: /dev/sda}\n", i, role, addr)
	}
	write := func(dir string, lines []string) error {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return err
		}
		data := header + strings.Join(lines, "")
		if err := os.WriteFile(filepath.Join(dir, "inventory.yaml"), []byte(data), 0o644); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "secrets.yaml"), secrets, 0o600)
	}
	endpoints := map[string]string{}
	var all []string
	for i := range n {
		endpoints[fmt.Sprintf("m-%05d", i)] = address(i) + ":50000"
		all = append(all, line(i, address(i)))
	}
	if err := write(dir, all); err != nil {
		return nil, nil, err
	}
	cps := min(n, controlPlanes)
	workers := n - cps
	count := max(1, (workers+perSim-cps-1)/(perSim-cps))
	var parts [][]string
	for k := range count {
		lo, hi := cps+k*workers/count, cps+(k+1)*workers/count
		var names, lines []string
		for i := range cps {
			if count > 1 && k > 0 {
				lines = append(lines, line(i, fmt.Sprintf("127.254.%d.%d", k, i+1)))
			} else {
				lines = append(lines, line(i, address(i)))
			}
		}
		for i := lo; i < hi; i++ {
			names = append(names, fmt.Sprintf("m-%05d", i))
			lines = append(lines, line(i, address(i)))
		}
		parts = append(parts, names)
		if count > 1 {
			if err := write(filepath.Join(dir, fmt.Sprintf("part-%d", k)), lines); err != nil {
				return nil, nil, err
			}
		}
	}
	return parts, endpoints, nil
}

// simCapacity is how many machines one sim process serves: a listener per
// machine, under the hard open-files limit (which an unprivileged process
// cannot raise), with room for the connections.
func simCapacity() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max > 1<<20 {
		return 1 << 20
	}
	return max(1000, int(lim.Max)-2048)
}

// cleanEnv keeps the caller's DEVATA_*/TALOSCONFIG/KUBECONFIG out of the runs.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DEVATA_") && !strings.HasPrefix(kv, "TALOSCONFIG=") && !strings.HasPrefix(kv, "KUBECONFIG=") {
			out = append(out, kv)
		}
	}
	if p := os.Getenv("FLEETBENCH_CPUPROFILE_DIR"); p != "" {
		// profile every devata run into this directory (one file per process)
		out = append(out, "DEVATA_CPUPROFILE="+filepath.Join(p, fmt.Sprintf("devata-%d.prof", time.Now().UnixNano())))
	}
	return append(out, "XDG_CONFIG_HOME=/nonexistent")
}

// peakRSS is a live process's peak resident set (VmHWM) in MiB.
func peakRSS(pid int) float64 {
	return kibField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM:") / 1024
}

// kibField reads a "Key:   N kB" line of a /proc file (0 when absent).
func kibField(path, key string) float64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			if f := strings.Fields(rest); len(f) > 0 {
				kb, _ := strconv.Atoi(f[0])
				return float64(kb)
			}
		}
	}
	return 0
}

// procCPU is a live process's user plus system CPU seconds (/proc/PID/stat,
// in clock ticks of 1/100 s, the Linux USER_HZ).
func procCPU(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// the command name may hold spaces: fields count from after its ')'
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100
}

// loopbackBytes is the bytes received on lo so far (each byte sent over
// loopback is received once).
func loopbackBytes() int64 {
	data, err := os.ReadFile("/proc/net/dev")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && name == "lo" {
			if f := strings.Fields(rest); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

func loadAvg() [3]float64 {
	var out [3]float64
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	for i, f := range strings.Fields(string(data)) {
		if i == 3 {
			break
		}
		out[i], _ = strconv.ParseFloat(f, 64)
	}
	return out
}

func memTotalMiB() float64 { return kibField("/proc/meminfo", "MemTotal:") / 1024 }

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
