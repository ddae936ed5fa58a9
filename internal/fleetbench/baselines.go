package main

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/talosapi"
)

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
	err = talosapi.ForEach(context.Background(), ms, concurrency, 30*time.Second, func(ctx context.Context, m *inventory.Machine) error {
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
