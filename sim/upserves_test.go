package sim_test

import (
	"runtime"
	"testing"
	"time"

	"devata.dev/devata/sim"
)

// A machine Observe calls up serves a new connection at once: a test that
// waits for !Down and then dials must not meet a listener that still
// refuses (TestEtcdJoinTimeout once read "connection reset by peer" there).
func TestAMachineObservedUpServes(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := startWith(t, sim.Options{RebootDelay: time.Millisecond, Machines: []sim.MachineSpec{{Name: "cp-1", Role: "controlplane", Config: cp}}})
	m := f.Machine("cp-1")

	for i := range 30 {
		m.Crash()
		deadline := time.Now().Add(10 * time.Second)
		for m.Observe().Down { // as soon as it is up, not a poll later
			if time.Now().After(deadline) {
				t.Fatalf("reboot %d: cp-1 not back after 10s", i)
			}
			runtime.Gosched()
		}

		if _, err := admin(t, m.Addr()).Version(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("reboot %d: a call as soon as the machine is observed up: %v", i, err)
		}
	}
}
