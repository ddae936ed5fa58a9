package membership_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/internal/simtest"
	"devata.dev/devata/membership"
	"devata.dev/devata/sim"
	"devata.dev/devata/talosapi"
)

// With every control plane up, one reports etcd's members; with two of
// three down the one left runs etcd without a leader and cannot list them:
// ObserveMembers says etcd has no quorum and what to do, not that the
// members are unknown for no reason.
func TestObserveMembersWithoutQuorum(t *testing.T) {
	f := simtest.Start(t, simtest.Options{Bootstrap: true})
	ctx := context.Background()
	ms, err := membership.ObserveMembers(ctx, f.Inventory, f.Dialer, 5*time.Second)
	if err != nil || len(ms.IDs) != 3 || ms.From.Name != "cp-1" {
		t.Fatalf("members of a healthy etcd: %+v, %v; want three, from cp-1", ms, err)
	}
	f.Sim.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
	f.Sim.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})
	_, err = membership.ObserveMembers(ctx, f.Inventory, f.Dialer, 5*time.Second)
	if !errors.Is(err, talosapi.ErrEtcdNoLeader) || !strings.Contains(err.Error(), "cp-1: etcd has no leader") ||
		!strings.Contains(err.Error(), "; etcd has no leader, so no quorum: no member lists the members") || !strings.Contains(err.Error(), "bring back the control planes that are down") {
		t.Errorf("members without quorum: %v; want no quorum named, with what to do", err)
	}
}
