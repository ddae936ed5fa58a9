package reconcile_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/reconcile"
)

// failingWriter refuses every write, as a full disk does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

func TestAuditLogThatCannotBeWrittenStopsTheChange(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	f.Drift(t, "worker-1", "time.cloudflare.com", "pool.ntp.org")
	m := f.Sim.Machine("worker-1")

	audits := map[string]func(t *testing.T) *reconcile.AuditLog{
		"failing writer": func(*testing.T) *reconcile.AuditLog {
			return reconcile.NewAuditLog(failingWriter{}, "test", reconcile.Shard{})
		},
	}
	if runtime.GOOS == "linux" {
		audits["/dev/full"] = func(t *testing.T) *reconcile.AuditLog {
			a, err := reconcile.OpenAuditLog("/dev/full", "test", reconcile.Shard{})
			if err != nil {
				t.Fatalf("open /dev/full (Linux has it): %v", err)
			}
			t.Cleanup(func() { _ = a.Close() })
			return a
		}
	}
	for name, open := range audits {
		t.Run(name, func(t *testing.T) {
			h := newLoop(t, f)
			h.opts.Audit = open(t)
			res := h.loop().Once(context.Background())
			if n := writes(m); n != 0 {
				t.Fatalf("%d ApplyConfiguration writes reached worker-1 although its audit record was not written", n)
			}
			if res.Outcomes["worker-1"] != reconcile.OutcomeFailed || res.ExitCode() != 2 {
				t.Errorf("outcome %q exit %d, want failed and 2", res.Outcomes["worker-1"], res.ExitCode())
			}
			msg := res.Errors["worker-1"]
			for _, want := range []string{"worker-1 not changed: audit log", "no space left on device", "fix or free the audit log path, or run without --audit-log"} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not say %q", msg, want)
				}
			}
			if name == "/dev/full" && !strings.Contains(msg, "audit log /dev/full: write") {
				t.Errorf("error %q does not name the audit log's path", msg)
			}
		})
	}
	if h := newLoop(t, f); h.inSync(t, "worker-1") {
		t.Error("worker-1's config was changed")
	}
}
