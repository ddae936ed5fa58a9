package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"devata.dev/devata/gate"
	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
)

// The fault matrix (issue 15, item 7). Each round starts a built fleet,
// drifts some machines (control planes among them, with changes that
// reboot and changes that do not), injects faults on a random schedule (a
// control plane unreachable or slow for a while, a reboot in the middle of
// an apply) and runs two or three writers at once (apply --yes, apply --yes
// --machines, reconcile --once, some with --wait-lock), cancelling one
// writer's context mid-run as SIGTERM does (main wires SIGTERM to the
// context's cancellation through signal.NotifyContext; nothing else
// arrives). Then it asserts what must hold whatever the schedule was:
//
//  1. never two control planes down at once by devata's hand (the sim's
//     own view of reboots; the test's Unreachable fault is not down);
//  2. exactly one etcd cluster (the sim's clusters, then every control
//     plane's view through the API);
//  3. every writer exits with a documented code and reports every machine
//     it was asked about, or was refused by the lock, naming the holder,
//     having sent nothing at all (each writer reaches the machines
//     through its own relays, so what a writer sent is seen per writer);
//  4. no secret of the bundle in any output or audit log;
//  5. the audit log is complete: every started change has its one result,
//     and every config write the machines received is one a writer
//     announced (apply) or recorded (reconcile);
//
// and that, with the faults lifted, one apply converges and drift is clean.
//
// The schedule comes from a seed: DEVATA_FAULT_SEED replays it (the faults,
// writers and times; not the goroutines' interleaving), DEVATA_FAULT_ROUNDS
// runs more rounds (task fault-matrix).
const (
	faultSeedEnv   = "DEVATA_FAULT_SEED"
	faultRoundsEnv = "DEVATA_FAULT_ROUNDS"
)

func TestFaultMatrix(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv(faultSeedEnv); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: %v", faultSeedEnv, s, err)
		}
		seed = v
	}
	// A round takes two to four seconds on two cores, a little more under
	// the race detector, where the default is fewer rounds.
	rounds := 12
	if testing.Short() || raceEnabled() {
		rounds = 6
	}
	if s := os.Getenv(faultRoundsEnv); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 {
			t.Fatalf("%s=%q: want a positive number of rounds", faultRoundsEnv, s)
		}
		rounds = v
	}
	t.Logf("fault matrix: seed %d, %d rounds; replay with %s=%d %s=%d go test -run TestFaultMatrix -count=1 -v ./cmd/devata",
		seed, rounds, faultSeedEnv, seed, faultRoundsEnv, rounds)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // once: the writers run at the same time
	for i := range rounds {
		rs := seed + int64(i)
		if !t.Run(fmt.Sprintf("round-%d", i), func(t *testing.T) { faultRound(t, rs) }) {
			t.Logf("round %d failed; replay it alone with %s=%d %s=1 go test -run TestFaultMatrix -count=1 -v ./cmd/devata", i, faultSeedEnv, rs, faultRoundsEnv)
		}
	}
}

// raceEnabled reports whether the test binary was built with -race.
func raceEnabled() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

var (
	homelabControlPlanes = []string{"cp-1", "cp-2", "cp-3"}
	homelabWorkers       = []string{"worker-1", "worker-2"}
)

// A round's schedule, decided from its seed before anything runs.
type faultSchedule struct {
	drifts  []plannedDrift
	faults  []plannedFault
	writers []*faultWriter
}

type plannedDrift struct {
	machine string
	reboots bool // diskQuotaSupport needs a reboot; an NTP server does not
}

type plannedFault struct {
	machine   string
	kind      string // "unreachable", "latency", "reboot-during-apply"
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
		case "reboot-during-apply":
			fmt.Fprintf(&b, "  fault %s reboot-during-apply (armed from the start)\n", f.machine)
		case "latency":
			fmt.Fprintf(&b, "  fault %s latency %s from %s to %s\n", f.machine, f.latency, f.at, f.until)
		default:
			fmt.Fprintf(&b, "  fault %s %s from %s to %s\n", f.machine, f.kind, f.at, f.until)
		}
	}
	for _, w := range s.writers {
		fmt.Fprintf(&b, "  writer %d at %s: %s", w.id, w.start, strings.Join(w.commandArgs(), " "))
		if w.cancelAt > 0 {
			fmt.Fprintf(&b, " (SIGTERM %s after its start)", w.cancelAt)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// faultWriter is one devata writer of a round, run in-process with its own
// context and its own relays to the machines.
type faultWriter struct {
	id        int
	kind      string   // apply, apply-machines, reconcile
	asked     []string // apply-machines: --machines
	waitLock  bool
	writeRate string // reconcile: --write-rate
	start     time.Duration
	cancelAt  time.Duration // after its start; 0: never

	settings, audit string
	relays          []*relay

	code           int
	stdout, stderr string
	cancelled      atomic.Bool // its context was cancelled before it returned
	took           time.Duration
}

// commandArgs are the writer's arguments, without --config.
func (w *faultWriter) commandArgs() []string {
	var args []string
	switch w.kind {
	case "apply", "apply-machines":
		args = []string{"apply", "--yes", "--wait", "20s"}
		if w.kind == "apply-machines" {
			args = append(args, "--machines", strings.Join(w.asked, ","))
		}
	case "reconcile":
		args = []string{"reconcile", "--once", loopChecks, "--audit-log", w.audit, "--wait", "20s", "--grace", "20s", "--write-rate", w.writeRate}
	}
	args = append(args, "--timeout", "5s")
	if w.waitLock {
		args = append(args, "--wait-lock", "60s")
	}
	return args
}

// askedAbout are the machines the writer must report.
func (w *faultWriter) askedAbout() []string {
	if w.kind == "apply-machines" {
		return w.asked
	}
	return slices.Concat(homelabControlPlanes, homelabWorkers)
}

// run runs the writer at its time; abort ends it as SIGTERM would (a round
// that hangs).
func (w *faultWriter) run(abort context.Context, t0 time.Time) {
	time.Sleep(time.Until(t0.Add(w.start)))
	ctx, cancel := context.WithCancel(abort)
	defer cancel()
	if w.cancelAt > 0 {
		timer := time.AfterFunc(w.cancelAt, func() { w.cancelled.Store(true); cancel() })
		defer timer.Stop()
	}
	var out, errb lockedBuffer
	began := time.Now()
	w.code = run(ctx, append(w.commandArgs(), "--config", w.settings), Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	w.took = time.Since(began)
	w.stdout, w.stderr = out.String(), errb.String()
}

// connections is how many connections the writer opened to any machine.
func (w *faultWriter) connections() int {
	n := 0
	for _, r := range w.relays {
		n += int(r.accepted.Load())
	}
	return n
}

func (w *faultWriter) String() string {
	return fmt.Sprintf("writer %d (%s): exit %d after %s, cancelled %t, %d connections\n--- stdout\n%s--- stderr\n%s", w.id, strings.Join(w.commandArgs(), " "), w.code, w.took.Round(time.Millisecond), w.cancelled.Load(), w.connections(), w.stdout, w.stderr)
}

// relay is a loopback TCP relay in front of one simulated machine. mTLS
// passes through it untouched (the server certificate names 127.0.0.1, as
// the relay's address does); it only counts connections, so that what
// one writer sent can be told from what another did.
type relay struct {
	ln       net.Listener
	target   string
	accepted atomic.Int32
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
	r.wg.Go(r.serve)
	t.Cleanup(r.close)
	return r
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.accepted.Add(1)
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		r.mu.Lock()
		r.conns = append(r.conns, c, up)
		r.mu.Unlock()
		// The machine dropping its side (unreachable, rebooting) drops the
		// client's, as it would without the relay.
		r.wg.Go(func() { _, _ = io.Copy(up, c); up.Close(); c.Close() })
		r.wg.Go(func() { _, _ = io.Copy(c, up); up.Close(); c.Close() })
	}
}

func (r *relay) close() {
	r.ln.Close()
	r.mu.Lock()
	for _, c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	r.wg.Wait()
}

// writerSettings writes a copy of the sim's settings file whose dial
// overrides point at the writer's own relays.
func writerSettings(t *testing.T, sf *simFleet, w *faultWriter, dir string) {
	t.Helper()
	data, err := os.ReadFile(sf.settings)
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	dial := map[string]string{}
	for _, m := range sf.Sim.Machines() {
		r := startRelay(t, m.Addr())
		w.relays = append(w.relays, r)
		dial[m.Name()] = r.ln.Addr().String()
	}
	values["dial"] = dial
	out, err := yaml.Marshal(values)
	if err != nil {
		t.Fatal(err)
	}
	w.settings = filepath.Join(dir, "devata.yaml")
	if err := os.WriteFile(w.settings, out, 0o600); err != nil {
		t.Fatal(err)
	}
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
	in.edit(f.machine, func(faults *sim.Faults) {
		switch f.kind {
		case "unreachable":
			faults.Unreachable = on
		case "latency":
			faults.Latency = 0
			if on {
				faults.Latency = f.latency
			}
		case "reboot-during-apply":
			faults.RebootDuringApply = on
		}
	})
	if on && f.kind != "reboot-during-apply" {
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
		in.edit(m.Name(), func(f *sim.Faults) { f.Unreachable, f.Latency, f.RebootDuringApply = false, 0, false })
	}
}

// downSpan is a time a control plane was certainly down in a reboot: from
// the first sample that saw it down (it went down at or before) to the
// moment it booted again, as the sim recorded it.
type downSpan struct {
	machine  string
	from, to time.Time
}

// cpWatch samples the control planes from the sim's side every couple of
// milliseconds (a reboot takes 50ms here) and keeps their down spans and
// the most etcd clusters it saw at once.
type cpWatch struct {
	stop, done  chan struct{}
	spans       []downSpan
	missed      int // reboots begun and over between two samples: seen as a point
	maxClusters int
}

func watchControlPlanes(f *sim.Fleet) *cpWatch {
	w := &cpWatch{stop: make(chan struct{}), done: make(chan struct{})}
	type state struct {
		last     sim.Observation
		open     bool
		from     time.Time
		openGen  int
		lastDown time.Time
	}
	st := map[string]*state{}
	for _, name := range homelabControlPlanes {
		st[name] = &state{last: f.Machine(name).Observe()}
	}
	go func() {
		defer close(w.done)
		for i := 0; ; i++ {
			now := time.Now()
			for _, name := range homelabControlPlanes {
				s, o := st[name], f.Machine(name).Observe()
				switch {
				case o.Down && !s.open:
					s.open, s.from, s.openGen = true, now, o.Reboots
					s.lastDown = now
				case o.Down:
					s.lastDown = now
				case s.open:
					to := o.Booted
					if o.Reboots != s.openGen {
						// up, down and up again since the last sample: the
						// first boot is not known, the last down sample is
						to = s.lastDown
						w.spans = append(w.spans, downSpan{name, o.Booted, o.Booted})
						w.missed += o.Reboots - s.openGen
					}
					w.spans = append(w.spans, downSpan{name, s.from, to})
					s.open = false
				case o.Reboots != s.last.Reboots:
					w.spans = append(w.spans, downSpan{name, o.Booted, o.Booted})
					w.missed += o.Reboots - s.last.Reboots
				}
				s.last = o
			}
			if i%10 == 0 {
				w.maxClusters = max(w.maxClusters, len(f.EtcdClusters()))
			}
			select {
			case <-w.stop:
				for name, s := range st {
					if s.open {
						w.spans = append(w.spans, downSpan{name, s.from, time.Now()})
					}
				}
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *cpWatch) finish() {
	close(w.stop)
	<-w.done
}

// overlaps are the pairs of spans of different control planes that share a moment.
func (w *cpWatch) overlaps() []string {
	var out []string
	for i, a := range w.spans {
		for _, b := range w.spans[i+1:] {
			if a.machine != b.machine && !a.from.After(b.to) && !b.from.After(a.to) {
				out = append(out, fmt.Sprintf("%s down %s–%s and %s down %s–%s",
					a.machine, a.from.Format("15:04:05.000"), a.to.Format("15:04:05.000"),
					b.machine, b.from.Format("15:04:05.000"), b.to.Format("15:04:05.000")))
			}
		}
	}
	return out
}

// configWrites are the config writes (not dry runs) each machine received.
func configWrites(f *sim.Fleet) map[string]int {
	out := map[string]int{}
	for _, m := range f.Machines() {
		out[m.Name()] = m.Calls("ApplyConfiguration") - m.Calls("ApplyConfiguration(dry-run)")
	}
	return out
}

var (
	lockRefusal   = "another writer holds the cluster's lock"
	lockWaitEnded = "waiting for the cluster's lock"
	planLineRe    = regexp.MustCompile(`(?m)^  (\S+)\s+(apply |in sync|skipped: )`)
	announcedRe   = regexp.MustCompile(`(?m)^==> (\S+): apply`)
	tableRowRe    = regexp.MustCompile(`(?m)^(\S+)\s+(controlplane|worker)\s+\S+\s+(InSync|Drifted|Unknown)\b`)
	outcomeLineRe = regexp.MustCompile(`(?m)^((?:cp|worker)-\d+) +(\S*)$`)
)

func faultRound(t *testing.T, seed int64) {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x15_07))
	sched := planFaultRound(rng)
	start := time.Now()
	sf := startSim(t, simtest.Options{Bootstrap: true})
	for _, d := range sched.drifts {
		if d.reboots {
			sf.Drift(t, d.machine, "diskQuotaSupport: true", "diskQuotaSupport: false")
		} else {
			sf.Drift(t, d.machine, "time.cloudflare.com", "pool.ntp.org")
		}
	}
	for _, w := range sched.writers {
		dir := t.TempDir()
		if w.kind == "reconcile" {
			w.audit = filepath.Join(dir, "audit.jsonl")
		}
		writerSettings(t, sf, w, dir)
	}
	t.Logf("schedule (seed %d):\n%s", seed, sched)

	in := &injector{sf: sf, netted: map[string]bool{}}
	for _, f := range sched.faults {
		if f.at == 0 && f.until == 0 {
			in.set(f, true) // armed before anything is sent
		}
	}
	before := configWrites(sf.Sim)
	watch := watchControlPlanes(sf.Sim)

	t0 := time.Now()
	faultCtx, stopFaults := context.WithCancel(context.Background())
	var faults, writers sync.WaitGroup
	for _, f := range sched.faults {
		if f.at != 0 || f.until != 0 {
			faults.Go(func() { in.play(faultCtx, t0, f) })
		}
	}
	abort, abortWriters := context.WithCancel(context.Background())
	defer abortWriters()
	for _, w := range sched.writers {
		writers.Go(func() { w.run(abort, t0) })
	}
	done := make(chan struct{})
	go func() { writers.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(3 * time.Minute):
		// every fault ended long ago: a writer hangs
		stopFaults()
		faults.Wait()
		in.liftAll()
		abortWriters()
		select {
		case <-done:
		case <-time.After(time.Minute):
		}
		t.Fatalf("writers still running 3 minutes after the start, every fault over: devata hung\n%s", sched)
	}
	midApply := 0 // RebootDuringApply faults that fired: the sim clears them then
	for _, f := range sched.faults {
		if f.kind == "reboot-during-apply" && !sf.Sim.Machine(f.machine).Faults().RebootDuringApply {
			midApply++
		}
	}
	stopFaults()
	faults.Wait()
	in.liftAll()
	watch.finish()
	after := configWrites(sf.Sim)
	ran := time.Since(t0)

	defer func() {
		if t.Failed() {
			for _, w := range sched.writers {
				t.Logf("%s", w)
			}
		}
	}()

	// 1. Never two control planes down at once by devata's hand.
	if o := watch.overlaps(); len(o) > 0 {
		t.Errorf("two control planes were down at once: %s", strings.Join(o, "; "))
	}
	if watch.missed > 0 {
		t.Logf("the watcher saw %d control-plane reboots only after they were over (a sample gap over the 50ms reboot)", watch.missed)
	}

	// 2. Exactly one etcd cluster, throughout.
	if watch.maxClusters != 1 {
		t.Errorf("the sim held %d etcd clusters at once during the round, want 1", watch.maxClusters)
	}

	// 3 and 5: each writer's exit, report and what it sent; the audit logs.
	announced := map[string]int{}
	var everything strings.Builder
	for _, w := range sched.writers {
		everything.WriteString(w.stdout + w.stderr)
		checkWriter(t, w, announced)
		if w.audit != "" {
			data, err := os.ReadFile(w.audit)
			if err != nil && !os.IsNotExist(err) {
				t.Errorf("writer %d: audit log: %v", w.id, err)
			}
			everything.Write(data)
			if refused(w) {
				if len(data) > 0 {
					t.Errorf("writer %d was refused the lock but wrote its audit log:\n%s", w.id, data)
				}
				continue
			}
			for m, n := range checkAudit(t, w, data) {
				announced[m] += n
			}
		}
	}
	for _, m := range sf.Sim.Machines() {
		name := m.Name()
		got, want := after[name]-before[name], announced[name]
		switch {
		case got > want:
			t.Errorf("%s received %d config writes, but the writers announced (apply) or recorded (reconcile audit) only %d: a write nobody reported", name, got, want)
		case got < want && !in.netted[name]:
			t.Errorf("%s received %d config writes, but the writers announced or recorded %d, and it was never unreachable or slow", name, got, want)
		}
	}

	// 4. No secret anywhere.
	checkNoSecrets(t, sf, "the writers' output or audit logs", everything.String())

	// The cluster is left healthy: with the faults lifted one apply
	// converges (the lock is free: no writer kept it), and drift is clean.
	ctx := context.Background()
	final := func(args ...string) result {
		var out, errb lockedBuffer
		code := run(ctx, append(args, "--config", sf.settings), Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
		r := result{code, out.String(), errb.String()}
		checkNoSecrets(t, sf, strings.Join(args, " "), r.stdout+r.err)
		return r
	}
	if r := final("apply", "--yes", "--timeout", "5s", "--wait", "30s"); r.code != 0 {
		t.Errorf("apply after the round, faults lifted: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	if r := final("drift", loopChecks); r.code != 0 {
		t.Errorf("drift after the final apply: exit %d\n%s%s", r.code, r.stdout, r.err)
	}
	clusters := sf.Sim.EtcdClusters()
	if len(clusters) != 1 || !slices.Equal(slices.Sorted(slices.Values(clusters[0].Members)), homelabControlPlanes) || len(clusters[0].Learners) > 0 {
		t.Errorf("etcd after the round: %+v, want one cluster of %v", clusters, homelabControlPlanes)
	}
	if err := gate.EtcdHealthy(ctx, sf.Inventory, sf.Dialer, 5*time.Second); err != nil {
		t.Errorf("etcd as the control planes see it after the round: %v", err)
	}

	var cpReboots, writes int
	for name, n := range after {
		writes += n - before[name]
	}
	for _, s := range watch.spans {
		if s.from != s.to {
			cpReboots++
		}
	}
	var summary []string
	for _, w := range sched.writers {
		what := fmt.Sprintf("exit %d", w.code)
		if refused(w) {
			what = "refused by the lock"
		}
		if w.cancelled.Load() {
			what += ", SIGTERM"
		}
		summary = append(summary, fmt.Sprintf("writer %d %s: %s in %s", w.id, w.kind, what, w.took.Round(time.Millisecond)))
	}
	t.Logf("writers ran %s: %d config writes, %d control-plane reboots, %d reboots mid-apply; %s; round %s", ran.Round(time.Millisecond), writes, cpReboots, midApply, strings.Join(summary, "; "), time.Since(start).Round(time.Millisecond))
}

// refused: the writer never held the lock (refused at once, or its wait
// for it ended).
func refused(w *faultWriter) bool {
	return w.code == exitTrouble && (strings.Contains(w.stderr, lockRefusal) || strings.Contains(w.stderr, lockWaitEnded))
}

// checkWriter asserts invariant 3 for one writer and adds the config
// writes an apply announced to announced.
func checkWriter(t *testing.T, w *faultWriter, announced map[string]int) {
	t.Helper()
	if w.code != exitOK && w.code != exitFailed && w.code != exitTrouble {
		t.Errorf("writer %d: exit %d is none of the documented 0, 1, 2", w.id, w.code)
	}
	if refused(w) {
		if n := w.connections(); n != 0 {
			t.Errorf("writer %d was refused the lock, yet opened %d connections to the machines", w.id, n)
		}
		if w.stdout != "" {
			t.Errorf("writer %d was refused the lock, yet printed:\n%s", w.id, w.stdout)
		}
		if strings.Contains(w.stderr, lockRefusal) {
			if holder := fmt.Sprintf("(pid %d on ", os.Getpid()); !strings.Contains(w.stderr, holder) {
				t.Errorf("writer %d was refused the lock without being told who holds it (want %q):\n%s", w.id, holder, w.stderr)
			}
		} else if !w.cancelled.Load() {
			t.Errorf("writer %d stopped waiting for the lock, but it was not cancelled:\n%s", w.id, w.stderr)
		}
		return
	}
	switch w.kind {
	case "apply", "apply-machines":
		checkApplyReport(t, w, announced)
	case "reconcile":
		checkReconcileReport(t, w)
	}
}

// checkApplyReport: the plan shows every machine asked about and no other,
// and the end of the rollout says what became of every planned change.
func checkApplyReport(t *testing.T, w *faultWriter, announced map[string]int) {
	t.Helper()
	for _, m := range announcedRe.FindAllStringSubmatch(w.stdout, -1) {
		announced[m[1]]++
	}
	if !strings.Contains(w.stdout, "plan:\n") {
		// SIGTERM while planning: nothing is applied, and it says so
		if !w.cancelled.Load() || !strings.Contains(w.stderr, "planning interrupted") || !strings.Contains(w.stderr, "nothing was applied") {
			t.Errorf("writer %d printed no plan", w.id)
		}
		return
	}
	planned := map[string]string{}
	for _, m := range planLineRe.FindAllStringSubmatch(w.stdout, -1) {
		planned[m[1]] = strings.TrimSpace(m[2])
	}
	asked := w.askedAbout()
	for _, name := range asked {
		if _, ok := planned[name]; !ok {
			t.Errorf("writer %d: the plan does not report %s", w.id, name)
		}
	}
	told := map[string]string{}
	for line := range strings.Lines(w.stdout) {
		for _, prefix := range []string{"converged: ", "failed: ", "not started: "} {
			if rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), prefix); ok {
				for _, name := range strings.Split(rest, ", ") {
					told[name] = strings.TrimSuffix(prefix, ": ")
				}
			}
		}
	}
	for name, kind := range planned {
		switch {
		case !slices.Contains(asked, name):
			t.Errorf("writer %d: the plan reports %s, which it was not asked about", w.id, name)
		case kind == "apply" && told[name] == "":
			t.Errorf("writer %d planned to apply %s but never said what became of it", w.id, name)
		case w.code == exitOK && (kind == "skipped:" || kind == "apply" && told[name] != "converged"):
			t.Errorf("writer %d: exit 0, but %s was %s %s", w.id, name, kind, told[name])
		}
	}
}

// checkReconcileReport: the pass's report has a row for every machine, and
// every machine it queued has an outcome.
func checkReconcileReport(t *testing.T, w *faultWriter) {
	t.Helper()
	rows := map[string]bool{}
	for _, m := range tableRowRe.FindAllStringSubmatch(w.stdout, -1) {
		rows[m[1]] = true
	}
	for _, name := range w.askedAbout() {
		if !rows[name] {
			t.Errorf("writer %d: the pass's report has no row for %s", w.id, name)
		}
	}
	for _, m := range outcomeLineRe.FindAllStringSubmatch(w.stdout, -1) {
		if m[2] == "" {
			t.Errorf("writer %d: %s was queued, and the pass reports no outcome for it", w.id, m[1])
		}
	}
}

// checkAudit asserts that every change the log records as started has
// exactly one result after it, and that the pass reports an outcome for
// each machine it changed; it returns the changes started, by machine.
func checkAudit(t *testing.T, w *faultWriter, data []byte) map[string]int {
	t.Helper()
	open, started := map[string]bool{}, map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(nil, 1<<20)
	for n := 1; sc.Scan(); n++ {
		var rec reconcile.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Errorf("writer %d: audit log line %d is not a record: %v\n%s", w.id, n, err, sc.Text())
			continue
		}
		switch rec.Result {
		case reconcile.ResultStarted:
			if open[rec.Machine] {
				t.Errorf("writer %d: audit log line %d starts a change of %s while the one before has no result", w.id, n, rec.Machine)
			}
			open[rec.Machine] = true
			started[rec.Machine]++
		case reconcile.ResultConverged, reconcile.ResultFailed, reconcile.ResultInterrupted, reconcile.ResultBlocked, reconcile.ResultAbandoned:
			if !open[rec.Machine] {
				t.Errorf("writer %d: audit log line %d is a result (%s) for %s with no started record before it", w.id, n, rec.Result, rec.Machine)
			}
			open[rec.Machine] = false
		default:
			t.Errorf("writer %d: audit log line %d: result %q", w.id, n, rec.Result)
		}
	}
	for m, o := range open {
		if o {
			t.Errorf("writer %d: the change of %s is recorded as started and has no result: the audit log is incomplete", w.id, m)
		}
	}
	outcomes := map[string]string{}
	for _, m := range outcomeLineRe.FindAllStringSubmatch(w.stdout, -1) {
		outcomes[m[1]] = m[2]
	}
	for m := range started {
		if outcomes[m] == "" {
			t.Errorf("writer %d changed %s (audit log) and its pass reports no outcome for it", w.id, m)
		}
	}
	return started
}

func checkNoSecrets(t *testing.T, sf *simFleet, what, text string) {
	t.Helper()
	for _, s := range simtest.BundleSecrets(sf.Bundle) {
		if strings.Contains(text, s) {
			t.Errorf("%s holds a secret of the bundle (%.8s…)", what, s)
			return
		}
	}
}
