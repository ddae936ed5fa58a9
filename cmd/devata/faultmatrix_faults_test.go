package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"devata.dev/devata/sim"
)

// A round's schedule, decided from its seed before anything runs.
type faultSchedule struct {
	drifts  []plannedDrift
	faults  []plannedFault
	writers []*faultWriter
	// backupAt: when a devata backup etcd runs, from the writers' start
	// (it takes no lock: it only reads)
	backupAt time.Duration
}

type plannedDrift struct {
	machine string
	reboots bool // diskQuotaSupport needs a reboot; an NTP server does not
}

type plannedFault struct {
	machine   string
	kind      string // "unreachable", "latency", "reboot-during-apply", "no-quorum", "corrupt-snapshot"
	second    string // no-quorum: the other control plane unreachable with machine
	latency   time.Duration
	at, until time.Duration // from the writers' start; until 0: until the round ends
}

func randMillis(rng *rand.Rand, lo, hi int) time.Duration {
	return time.Duration(lo+rng.IntN(hi-lo+1)) * time.Millisecond
}

func pickOne[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func planFaultRound(rng *rand.Rand) *faultSchedule {
	s := &faultSchedule{}
	cps := slices.Clone(homelabControlPlanes)
	rng.Shuffle(len(cps), func(i, j int) { cps[i], cps[j] = cps[j], cps[i] })
	ws := slices.Clone(homelabWorkers)
	rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	for i, m := range cps[:1+rng.IntN(len(cps))] {
		// the first drifted control plane mostly reboots: what invariant 1 is about
		s.drifts = append(s.drifts, plannedDrift{m, i == 0 && rng.IntN(4) > 0 || rng.IntN(2) == 0})
	}
	for _, m := range ws[:rng.IntN(len(ws)+1)] {
		s.drifts = append(s.drifts, plannedDrift{m, rng.IntN(2) == 0})
	}

	if rng.IntN(2) == 0 {
		at := randMillis(rng, 0, 800)
		s.faults = append(s.faults, plannedFault{machine: pickOne(rng, homelabControlPlanes), kind: "unreachable", at: at, until: at + randMillis(rng, 200, 2500)})
	}
	if rng.IntN(2) == 0 {
		at := randMillis(rng, 0, 600)
		s.faults = append(s.faults, plannedFault{machine: pickOne(rng, homelabControlPlanes), kind: "latency", latency: randMillis(rng, 20, 250), at: at, until: at + randMillis(rng, 500, 3000)})
	}
	if rng.IntN(3) == 0 {
		// two of three control planes gone at once: etcd has no quorum
		at := randMillis(rng, 0, 800)
		pair := slices.Clone(homelabControlPlanes)
		rng.Shuffle(len(pair), func(i, j int) { pair[i], pair[j] = pair[j], pair[i] })
		s.faults = append(s.faults, plannedFault{machine: pair[0], second: pair[1], kind: "no-quorum", at: at, until: at + randMillis(rng, 300, 2000)})
	}
	if rng.IntN(2) == 0 {
		// one control plane streams a snapshot whose hash is wrong
		s.faults = append(s.faults, plannedFault{machine: pickOne(rng, homelabControlPlanes), kind: "corrupt-snapshot"})
	}
	s.backupAt = randMillis(rng, 0, 1500)
	for range rng.IntN(3) {
		d := pickOne(rng, s.drifts)
		if !slices.ContainsFunc(s.faults, func(f plannedFault) bool { return f.kind == "reboot-during-apply" && f.machine == d.machine }) {
			s.faults = append(s.faults, plannedFault{machine: d.machine, kind: "reboot-during-apply"})
		}
	}

	n := 2 + rng.IntN(2)
	for i := range n {
		w := &faultWriter{id: i + 1, start: randMillis(rng, 0, 300), waitLock: rng.IntN(2) == 0}
		switch rng.IntN(3) {
		case 0:
			w.kind = "apply"
		case 1:
			w.kind = "apply-machines"
			all := slices.Concat(homelabControlPlanes, homelabWorkers)
			rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			w.asked = all[:1+rng.IntN(2)]
		default:
			w.kind = "reconcile"
			w.writeRate = pickOne(rng, []string{"0", "0", "2"})
		}
		s.writers = append(s.writers, w)
	}
	if rng.IntN(4) < 3 {
		pickOne(rng, s.writers).cancelAt = randMillis(rng, 50, 2000)
	}
	return s
}

func (s *faultSchedule) String() string {
	var b strings.Builder
	for _, d := range s.drifts {
		fmt.Fprintf(&b, "  drift %s (reboots %t)\n", d.machine, d.reboots)
	}
	for _, f := range s.faults {
		switch f.kind {
		case "reboot-during-apply", "corrupt-snapshot":
			fmt.Fprintf(&b, "  fault %s %s (armed from the start)\n", f.machine, f.kind)
		case "no-quorum":
			fmt.Fprintf(&b, "  fault %s and %s unreachable (no quorum) from %s to %s\n", f.machine, f.second, f.at, f.until)
		case "latency":
			fmt.Fprintf(&b, "  fault %s latency %s from %s to %s\n", f.machine, f.latency, f.at, f.until)
		default:
			fmt.Fprintf(&b, "  fault %s %s from %s to %s\n", f.machine, f.kind, f.at, f.until)
		}
	}
	fmt.Fprintf(&b, "  backup etcd at %s\n", s.backupAt)
	for _, w := range s.writers {
		fmt.Fprintf(&b, "  writer %d at %s: %s", w.id, w.start, strings.Join(w.commandArgs(), " "))
		if w.cancelAt > 0 {
			fmt.Fprintf(&b, " (SIGTERM %s after its start)", w.cancelAt)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// injector sets and lifts the schedule's faults; one at a time, as each
// is a read-modify-write of the machine's faults.
type injector struct {
	sf     *simFleet
	mu     sync.Mutex
	netted map[string]bool // machines that were unreachable or slow at some point
}

func (in *injector) edit(machine string, f func(*sim.Faults)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	m := in.sf.Sim.Machine(machine)
	faults := m.Faults() // DriftedConfig stays as it was: setting it unchanged re-drifts nothing
	f(&faults)
	m.SetFaults(faults)
}

func (in *injector) set(f plannedFault, on bool) {
	if f.kind == "no-quorum" {
		in.set(plannedFault{machine: f.second, kind: "unreachable"}, on)
	}
	in.edit(f.machine, func(faults *sim.Faults) {
		switch f.kind {
		case "unreachable", "no-quorum":
			faults.Unreachable = on
		case "corrupt-snapshot":
			faults.EtcdSnapshotCorrupt = on
		case "latency":
			faults.Latency = 0
			if on {
				faults.Latency = f.latency
			}
		case "reboot-during-apply":
			faults.RebootDuringApply = on
		}
	})
	if on && f.kind != "reboot-during-apply" && f.kind != "corrupt-snapshot" {
		in.mu.Lock()
		in.netted[f.machine] = true
		in.mu.Unlock()
	}
}

// play sets f at its time and lifts it at its end, or when ctx ends.
func (in *injector) play(ctx context.Context, t0 time.Time, f plannedFault) {
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(time.Until(t0.Add(d))):
			return true
		}
	}
	if !wait(f.at) {
		return
	}
	in.set(f, true)
	if f.until > 0 && wait(f.until) {
		in.set(f, false)
	}
}

func (in *injector) liftAll() {
	for _, m := range in.sf.Sim.Machines() {
		in.edit(m.Name(), func(f *sim.Faults) {
			f.Unreachable, f.Latency, f.RebootDuringApply, f.EtcdSnapshotCorrupt = false, 0, false, false
		})
	}
}
