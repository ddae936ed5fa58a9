package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

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
