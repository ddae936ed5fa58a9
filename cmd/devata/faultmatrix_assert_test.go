package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
	"devata.dev/devata/sim"
	"devata.dev/devata/snapshot"
)

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
	// one machine, or the machines a change (or skip) is the same for: "cp-2, cp-3 (2 machines) apply"
	planLineRe    = regexp.MustCompile(`(?m)^  (\S+(?:, \S+)*)(?: \(\d+ machines\))?\s+(apply |in sync|skipped: )`)
	announcedRe   = regexp.MustCompile(`(?m)^==> (\S+): apply`)
	tableRowRe    = regexp.MustCompile(`(?m)^(\S+)\s+(controlplane|worker)\s+\S+\s+(InSync|Drifted|Unknown)\b`)
	outcomeLineRe = regexp.MustCompile(`(?m)^((?:cp|worker)-\d+) +(\S*)$`)
)

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
		// SIGTERM while rendering or planning: nothing is applied, and it says so
		planning := strings.Contains(w.stderr, "planning interrupted") && strings.Contains(w.stderr, "nothing was changed")
		rendering := strings.Contains(w.stderr, "interrupted: rendering and validating stopped") && strings.Contains(w.stderr, "nothing was sent to any machine")
		if !w.cancelled.Load() || !planning && !rendering {
			t.Errorf("writer %d printed no plan", w.id)
		}
		return
	}
	planned := map[string]string{}
	for _, m := range planLineRe.FindAllStringSubmatch(w.stdout, -1) {
		for _, name := range strings.Split(m[1], ", ") {
			planned[name] = strings.TrimSpace(m[2])
		}
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

// runBackup runs devata backup etcd into dir at the given time.
func runBackup(ctx context.Context, at time.Time, sf *simFleet, dir string) result {
	time.Sleep(time.Until(at))
	var out, errb lockedBuffer
	code := run(ctx, []string{"backup", "etcd", "--to", dir + "/", "--timeout", "5s", "--config", sf.settings}, Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	return result{code, out.String(), errb.String()}
}

// checkBackup asserts invariant 6.
func checkBackup(t *testing.T, sched *faultSchedule, r result, dir string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.db"))
	faulted := slices.ContainsFunc(sched.faults, func(f plannedFault) bool {
		return f.kind == "no-quorum" || f.kind == "corrupt-snapshot" || f.kind == "unreachable" || f.kind == "latency"
	})
	switch r.code {
	case exitOK:
		if len(files) != 1 {
			t.Fatalf("backup exited 0 but wrote %d snapshots: %v\n%s", len(files), files, r.err)
		}
		if _, err := snapshot.Verify(context.Background(), files[0]); err != nil {
			t.Errorf("backup exited 0 with a snapshot that does not verify: %v\n%s", err, r.err)
		}
	case exitTrouble:
		if len(files) != 0 {
			t.Errorf("backup exited 2 but left %v", files)
		}
		if !faulted {
			t.Errorf("backup exited 2 in a round without etcd faults:\n%s", r.err)
		}
		if strings.TrimSpace(r.err) == "" {
			t.Error("backup exited 2 without saying why")
		}
	default:
		t.Errorf("backup: exit %d is none of the documented 0 and 2\n%s", r.code, r.err)
	}
}
