package sim_test

import (
	"strings"
	"testing"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

// TimeService as machined serves it (v1alpha1_time.go TimeServer): Time
// asks the config's first time server (constants.DefaultNTPServer without
// one), TimeCheck the one given ("ntp server is required" without), any
// role may; in maintenance mode below 1.13 the service does not exist, from
// 1.13 it answers with the default server. EtcdAlarmList
// (v1alpha1_server.go): one message without alarms on a control plane,
// Unimplemented on a worker, os:reader may.
func TestTimeAndEtcdAlarmList(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	cp = patch(t, cp, "machine:\n  time:\n    servers: [ntp.example.org, time.example.org]\n")
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "w-1", Config: wk},
		sim.MachineSpec{Name: "m-111", TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "m-113", TalosVersion: "v1.13.9"},
	)
	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	reader := dial(t, role.MakeSet(role.Reader), f.Machine("cp-1").Addr())
	before := time.Now()
	resp, err := reader.Time(t.Context())
	if err != nil {
		t.Fatalf("time: %v", err)
	}
	m := resp.Messages[0]
	if m.Server != "ntp.example.org" || m.Localtime.AsTime().Before(before) || m.Remotetime.AsTime().Before(before) {
		t.Errorf("time: %v", m)
	}
	if resp, err := admin(t, f.Machine("w-1").Addr()).Time(t.Context()); err != nil || resp.Messages[0].Server != "time.cloudflare.com" {
		t.Errorf("time on a worker whose config names no server: %v, %v; want time.cloudflare.com", resp, err)
	}
	if resp, err := reader.TimeCheck(t.Context(), "pool.ntp.org"); err != nil || resp.Messages[0].Server != "pool.ntp.org" {
		t.Errorf("time check: %v, %v", resp, err)
	}
	if _, err := reader.TimeCheck(t.Context(), ""); client.StatusCode(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "ntp server is required") {
		t.Errorf("time check without a server: %v", err)
	}

	if _, err := insecure(t, f.Machine("m-111").Addr()).Time(t.Context()); client.StatusCode(err) != codes.Unimplemented || !strings.Contains(err.Error(), "unknown service time.TimeService") {
		t.Errorf("time on a 1.11 machine in maintenance mode: %v; want unknown service", err)
	}
	if resp, err := insecure(t, f.Machine("m-113").Addr()).Time(t.Context()); err != nil || resp.Messages[0].Server != "time.cloudflare.com" {
		t.Errorf("time on a 1.13 machine in maintenance mode: %v, %v; want time.cloudflare.com", resp, err)
	}

	eventually(t, "etcd alarm list answers", func() error {
		resp, err := reader.EtcdAlarmList(ctxTimeout(t, time.Second))
		if err != nil {
			return err
		}
		if len(resp.Messages) != 1 || len(resp.Messages[0].MemberAlarms) != 0 {
			t.Errorf("alarms: %v; want one message, none", resp)
		}
		return nil
	})
	if _, err := admin(t, f.Machine("w-1").Addr()).EtcdAlarmList(t.Context()); client.StatusCode(err) != codes.Unimplemented ||
		!strings.Contains(err.Error(), "etcd alarm list is only available on control plane nodes") {
		t.Errorf("alarm list on a worker: %v", err)
	}
}
