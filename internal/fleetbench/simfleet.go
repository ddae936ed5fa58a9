package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"devata.dev/devata/checks"
	"devata.dev/devata/talosapi"
)

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
// until every one serves. kubernetes runs each sim's kube-apiserver and
// simulated kubelets; without it the sims serve the Talos API alone
// (devata sim --kubernetes=false), which is all the Talos-side checks read.
func startSims(bin, dir string, parts [][]string, endpoints map[string]string, kubernetes bool) (*simFleet, error) {
	f := &simFleet{dir: dir, endpoints: endpoints}
	for k, part := range parts {
		pdir := dir
		if len(parts) > 1 {
			pdir = filepath.Join(dir, fmt.Sprintf("part-%d", k))
		}
		p := &simProc{dir: filepath.Join(pdir, "sim"), machines: part, ready: make(chan struct{}), exited: make(chan struct{})}
		args := []string{"sim", "-i", filepath.Join(pdir, "inventory.yaml"), "--dir", p.dir, "--inventory-addresses", "--kubernetes=" + strconv.FormatBool(kubernetes)}
		if err := os.MkdirAll(p.dir, 0o700); err != nil {
			return f, err
		}
		p.cmd = exec.Command(bin, args...)
		p.cmd.Env = cleanEnv()
		// A fleetbench that dies (Ctrl-C, a failed step's os.Exit, a kill)
		// takes its sims with it; SIGTERM lets each stop its kube-apiserver.
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
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

func (f *simFleet) dialer() (*talosapi.Dialer, error) {
	tc, err := talosapi.LoadTalosconfig(f.talosconfig())
	if err != nil {
		return nil, err
	}
	return talosapi.NewDialer(tc, nil)
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
	secrets, err := os.ReadFile("render/testdata/secrets.yaml")
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

// needsKubernetes says whether any of the comma-separated checks reads the
// Kubernetes API (drift.Info.Kubernetes). The default checks (config,
// talos-version, machine-stage) read the Talos API alone, so the sims start
// no kube-apiserver for them: registering 10,000 simulated Nodes would
// measure the sim's kubelets, not devata.
func needsKubernetes(names string) bool {
	all := checks.All()
	for _, name := range strings.Split(names, ",") {
		if e, ok := all.Get(strings.TrimSpace(name)); ok && e.Kubernetes {
			return true
		}
	}
	return false
}
