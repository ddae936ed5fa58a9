package sim_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

func TestMaintenanceApply(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane"})
	m := f.Machine("cp-1")
	addr := m.Addr()

	c := insecure(t, addr)

	t.Run("refuses mTLS-only calls", func(t *testing.T) {
		if _, err := c.Version(t.Context()); client.StatusCode(err) != codes.Unimplemented {
			t.Errorf("version: %v, want Unimplemented", err)
		}

		if _, err := c.ServiceList(t.Context()); client.StatusCode(err) != codes.Unimplemented {
			t.Errorf("service list: %v, want Unimplemented", err)
		}

		_, err := safe.StateGet[*config.MachineConfig](t.Context(), c.COSI, config.NewMachineConfigWithID(nil, config.ActiveID).Metadata())
		if client.StatusCode(err) != codes.PermissionDenied {
			t.Errorf("get MachineConfig: %v, want PermissionDenied", err)
		}

		ms, err := safe.StateGet[*runtime.MachineStatus](t.Context(), c.COSI, runtime.NewMachineStatus().Metadata())
		if err != nil {
			t.Fatalf("get MachineStatus: %v", err)
		}

		if ms.TypedSpec().Stage != runtime.MachineStageMaintenance {
			t.Errorf("stage = %s, want maintenance", ms.TypedSpec().Stage)
		}
	})

	t.Run("refuses modes", func(t *testing.T) {
		for _, mode := range []machine.ApplyConfigurationRequest_Mode{machine.ApplyConfigurationRequest_NO_REBOOT, machine.ApplyConfigurationRequest_STAGED} {
			_, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: mode})
			if client.StatusCode(err) != codes.Unimplemented || !strings.Contains(err.Error(), "is not supported in maintenance mode") {
				t.Errorf("apply %s: %v, want Unimplemented", mode, err)
			}
		}
	})

	t.Run("validates", func(t *testing.T) {
		_, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: []byte("version: v1alpha1\nmachine: {}\n"), Mode: machine.ApplyConfigurationRequest_AUTO})
		if client.StatusCode(err) != codes.InvalidArgument {
			t.Errorf("apply invalid config: %v, want InvalidArgument", err)
		}
	})

	// internal/app/maintenance/server.go ApplyConfiguration runs
	// RuntimeValidate (machinery v1alpha1_validation.go) after Validate: in a
	// mode that installs, the install disk selector must match one of the
	// node's Disk resources, and the Kubernetes images must be ones this
	// Talos supports (ValidateKubernetesImageTag, compatibility talos111).
	t.Run("runtime validation", func(t *testing.T) {
		for _, tc := range []struct {
			name, patch, want string
		}{
			{"install disk selector matching no disk", `[{"op": "remove", "path": "/machine/install/disk"}, {"op": "add", "path": "/machine/install/diskSelector", "value": {"size": ">= 100TB"}}]`, "no disks matched the expression"},
			{"kubelet too old for Talos 1.11", `machine: {kubelet: {image: ghcr.io/siderolabs/kubelet:v1.20.0}}`, "kubelet image is not valid"},
			{"kube-apiserver too new for Talos 1.11", `cluster: {apiServer: {image: registry.k8s.io/kube-apiserver:v1.40.0}}`, "kube-apiserver image is not valid"},
		} {
			_, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: patch(t, cp, tc.patch), Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
			if client.StatusCode(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "runtime configuration validation failed") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: %v, want InvalidArgument runtime configuration validation failed: …%s…", tc.name, err, tc.want)
			}
		}
		// a selector matching the simulated system disk is accepted
		ok := patch(t, cp, `[{"op": "remove", "path": "/machine/install/disk"}, {"op": "add", "path": "/machine/install/diskSelector", "value": {"size": "<= 1TB"}}]`)
		if _, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: ok, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true}); err != nil {
			t.Errorf("a selector matching a disk: %v", err)
		}
	})

	t.Run("dry run", func(t *testing.T) {
		resp, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
		if err != nil {
			t.Fatalf("dry run: %v", err)
		}

		want := "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."
		if got := resp.Messages[0].ModeDetails; got != want {
			t.Errorf("details = %q, want %q", got, want)
		}
	})

	if _, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatalf("apply: %v", err)
	}

	// the node reboots into mTLS on the same address
	a := admin(t, addr)

	eventually(t, "configured node answers Version over mTLS", func() error {
		_, err := a.Version(ctxTimeout(t, time.Second))

		return err
	})

	if m.Addr() != addr {
		t.Errorf("address changed from %s to %s", addr, m.Addr())
	}

	mc, err := safe.StateGet[*config.MachineConfig](t.Context(), a.COSI, config.NewMachineConfigWithID(nil, config.ActiveID).Metadata())
	if err != nil {
		t.Fatalf("get MachineConfig: %v", err)
	}

	if name := mc.Provider().K8sClusterConfig().ClusterName(); name != "sim" {
		t.Errorf("active config cluster = %q", name)
	}

	// and no longer speaks to clients without a certificate
	if _, err := insecure(t, addr).Version(ctxTimeout(t, 2*time.Second)); err == nil {
		t.Error("configured node answered a client without a certificate")
	}
}

// TestBootstrap follows Talos v1.11.0's v1alpha1_server.go Bootstrap (the
// guard is the node's own etcd data directory), services/etcd.go (a joining
// control plane is a learner first, MemberAddAsLearner) and the
// maintenance service (internal/app/maintenance/server.go: no Bootstrap).
func TestBootstrap(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "cp-2", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "w-1", Role: "worker", Config: wk},
		sim.MachineSpec{Name: "cp-3", Role: "controlplane"},
	)

	bootstrap := func(name string) error {
		if name == "cp-3" && f.Machine(name).Calls("ApplyConfiguration") == 0 {
			return insecure(t, f.Machine(name).Addr()).Bootstrap(t.Context(), &machine.BootstrapRequest{})
		}

		return admin(t, f.Machine(name).Addr()).Bootstrap(t.Context(), &machine.BootstrapRequest{})
	}

	members := func(name string) ([]string, error) {
		resp, err := admin(t, f.Machine(name).Addr()).EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{})
		if err != nil {
			return nil, err
		}

		var names []string
		for _, m := range resp.Messages[0].Members {
			names = append(names, m.Hostname)
		}

		slices.Sort(names)

		return names, nil
	}

	// Without etcd the etcd client waits (internal/pkg/etcd/etcd.go): never
	// Unavailable, and never at once.
	begin := time.Now()
	if _, err := members("cp-1"); client.StatusCode(err) != codes.DeadlineExceeded || time.Since(begin) < 150*time.Millisecond {
		t.Errorf("member list before bootstrap: %v after %s, want DeadlineExceeded after the client's wait", err, time.Since(begin))
	}

	for _, tc := range []struct {
		machine string
		want    codes.Code
	}{
		{"w-1", codes.FailedPrecondition},
		{"cp-3", codes.Unimplemented}, // maintenance mode
		{"cp-1", codes.OK},
		{"cp-1", codes.AlreadyExists},
	} {
		if err := bootstrap(tc.machine); client.StatusCode(err) != tc.want {
			t.Errorf("bootstrap %s: %v, want %s", tc.machine, err, tc.want)
		}
	}

	eventually(t, "cp-2 joins", func() error {
		got, err := members("cp-2")
		if err != nil {
			return err
		}

		if !slices.Equal(got, []string{"cp-1", "cp-2"}) {
			return fmt.Errorf("members %v", got)
		}

		return nil
	})

	if err := bootstrap("cp-2"); client.StatusCode(err) != codes.AlreadyExists {
		t.Errorf("bootstrap cp-2 after joining: %v, want AlreadyExists", err)
	}

	if _, err := admin(t, f.Machine("w-1").Addr()).EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{}); client.StatusCode(err) != codes.Unimplemented {
		t.Errorf("member list on a worker: %v, want Unimplemented", err)
	}

	status, err := admin(t, f.Machine("cp-1").Addr()).EtcdStatus(t.Context())
	if err != nil || status.Messages[0].MemberStatus.MemberId == 0 {
		t.Errorf("etcd status = %v, %v", status, err)
	}

	// a control plane configured later joins on boot
	if _, err := insecure(t, f.Machine("cp-3").Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_REBOOT}); err != nil {
		t.Fatalf("apply cp-3: %v", err)
	}

	eventually(t, "cp-3 joins", func() error {
		got, err := members("cp-1")
		if err != nil {
			return err
		}

		if !slices.Equal(got, []string{"cp-1", "cp-2", "cp-3"}) {
			return fmt.Errorf("members %v", got)
		}

		return nil
	})

	// right after its boot cp-3 refuses while its CRI comes up
	// (IsBootstrapAllowed), then it has data
	eventually(t, "bootstrap cp-3 after joining answers AlreadyExists", func() error {
		if err := bootstrap("cp-3"); client.StatusCode(err) != codes.AlreadyExists {
			return err
		}

		return nil
	})

	// etcd shows as running on members only
	svcs, err := admin(t, f.Machine("cp-1").Addr()).ServiceInfo(t.Context(), "etcd")
	if err != nil || len(svcs) != 1 || svcs[0].Service.State != "Running" {
		t.Errorf("etcd service = %v, %v; want Running", svcs, err)
	}
}

// TestBootstrapTwiceSplitsEtcd: Talos guards Bootstrap by the local data
// directory only (v1alpha1_server.go Bootstrap), and services/etcd.go with
// Bootstrap: true starts a new single-member cluster. A control plane that
// has not joined yet (here: its join takes long) bootstrapped a second time
// makes a second etcd cluster, and both answer as healthy single clusters.
func TestBootstrapTwiceSplitsEtcd(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := startWith(t, sim.Options{
		EtcdJoinDelay: time.Hour,
		Machines: []sim.MachineSpec{
			{Name: "cp-1", Role: "controlplane", Config: cp},
			{Name: "cp-2", Role: "controlplane", Config: cp},
		},
	})

	list := func(name string) []*machine.EtcdMember {
		t.Helper()

		resp, err := admin(t, f.Machine(name).Addr()).EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{})
		if err != nil {
			t.Fatalf("member list %s: %v", name, err)
		}

		return resp.Messages[0].Members
	}

	if err := admin(t, f.Machine("cp-1").Addr()).Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap cp-1: %v", err)
	}

	// cp-2 is joining: a learner without a name in cp-1's cluster
	got := list("cp-1")
	if len(got) != 2 || got[0].Hostname != "cp-1" || got[1].Hostname != "" || !got[1].IsLearner {
		t.Errorf("cp-1's members while cp-2 joins = %v, want cp-1 and an unnamed learner", got)
	}

	if err := admin(t, f.Machine("cp-2").Addr()).Bootstrap(t.Context(), &machine.BootstrapRequest{}); err != nil {
		t.Fatalf("bootstrap cp-2 (no data yet): %v, want OK as Talos answers", err)
	}

	if got := list("cp-2"); len(got) != 1 || got[0].Hostname != "cp-2" {
		t.Errorf("cp-2's members = %v, want only cp-2: a second cluster", got)
	}

	if got := list("cp-1"); len(got) != 2 || got[1].Hostname != "" {
		t.Errorf("cp-1's members = %v, want cp-1 and the stale learner", got)
	}
}

// The hardware decides what an install disk selector finds: machinery's
// InstallDiskSelector.Expression turns type nvme into disk.transport ==
// "nvme", and Talos' Disk resource carries the kernel's transport. A
// selector for an NVMe disk is refused on a machine that has only SATA
// disks, and accepted on one whose system disk is an NVMe disk.
func TestInstallDiskSelectorMeetsTheHardware(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "sata", Role: "controlplane"},
		sim.MachineSpec{Name: "nvme", Role: "controlplane", SystemDisk: sim.SystemDiskFor("", "nvme")},
	)
	nvme := patch(t, cp, `[{"op": "remove", "path": "/machine/install/disk"}, {"op": "add", "path": "/machine/install/diskSelector", "value": {"type": "nvme", "size": "<= 600GB"}}]`)

	_, err := insecure(t, f.Machine("sata").Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: nvme, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true})
	if client.StatusCode(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `disk.transport == "nvme"`) {
		t.Errorf("nvme selector on SATA hardware: %v, want InvalidArgument no disks matched … transport nvme", err)
	}

	if _, err := insecure(t, f.Machine("nvme").Addr()).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: nvme, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true}); err != nil {
		t.Errorf("nvme selector on NVMe hardware: %v", err)
	}

	for _, tc := range []struct {
		dev, typ, wantDev string
		rotational        bool
	}{
		{"/dev/vda", "", "/dev/vda", false},
		{"", "sd", "/dev/mmcblk0", false},
		{"", "hdd", "/dev/sda", true},
		{"", "ssd", "/dev/sda", false},
	} {
		if got := sim.SystemDiskFor(tc.dev, tc.typ); got.Device != tc.wantDev || got.Rotational != tc.rotational {
			t.Errorf("SystemDiskFor(%q, %q) = %+v, want %s rotational=%v", tc.dev, tc.typ, got, tc.wantDev, tc.rotational)
		}
	}
}

// Right after a control plane boots into its config, before CRI is up
// (v1alpha1_runtime.go IsBootstrapAllowed) Bootstrap is refused with
// FailedPrecondition, and an etcd call fails building its client's TLS
// config because etcd's admin certificate is not written yet
// (internal/pkg/etcd/etcd.go): a plain error, code Unknown, not
// Unavailable. Once CRI is up the same Bootstrap succeeds.
func TestBootstrapRightAfterTheFirstBoot(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := startWith(t, sim.Options{Machines: []sim.MachineSpec{{Name: "cp-1", Role: "controlplane"}}, CRIStartDelay: 2 * time.Second})
	addr := f.Machine("cp-1").Addr()
	if _, err := insecure(t, addr).ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{Data: cp, Mode: machine.ApplyConfigurationRequest_AUTO}); err != nil {
		t.Fatal(err)
	}
	c := admin(t, addr)
	eventually(t, "cp-1 answers on mTLS", func() error {
		_, err := c.Version(t.Context())
		return err
	})
	booted := time.Now()

	err := c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
	if client.StatusCode(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "bootstrap is not available yet") {
		t.Errorf("bootstrap before CRI: %v, want FailedPrecondition bootstrap is not available yet", err)
	}
	_, err = c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{})
	if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), "error building etcd client TLS config") {
		t.Errorf("etcd members before the admin certificate: %v, want Unknown error building etcd client TLS config", err)
	}
	time.Sleep(time.Until(booted.Add(2 * time.Second)))
	eventually(t, "bootstrap once CRI is up", func() error {
		return c.Bootstrap(t.Context(), &machine.BootstrapRequest{})
	})
}
