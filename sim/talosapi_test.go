package sim_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/cosi-project/runtime/pkg/state"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/resources/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/etcd"
	"github.com/siderolabs/talos/pkg/machinery/resources/network"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"devata.dev/devata/sim"
)

// Where Talos' own API integration suites (internal/integration/api) found
// the sim unlike Talos; each test goes through machinery's client.

// Version's GoVersion is the Go that built the machine's Talos release
// (machinery constants.GoVersion of that tag), not the Go that built the
// sim: VersionSuite/TestExpectedVersionMaster compares them.
func TestVersionReportsTheGoOfTheRelease(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "v1110", Role: "controlplane", Config: cp, TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "v1113", Role: "controlplane", Config: cp, TalosVersion: "v1.11.3"},
		sim.MachineSpec{Name: "v1125", Role: "controlplane", Config: cp, TalosVersion: "v1.12.0"},
		sim.MachineSpec{Name: "v1141", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
	)
	for name, want := range map[string]string{
		"v1110": "go1.24.6", // machinery v1.11.0 constants.GoVersion
		"v1113": "go1.24.6", // no table entry: v1.11.1's, the nearest below
		"v1125": "go1.25.5", // none below in 1.12: v1.12.1's, the oldest of the minor
		"v1141": "go1.26.8", // machinery v1.14.1 constants.GoVersion
	} {
		c := admin(t, f.Machine(name).Addr())

		v, err := c.Version(t.Context())
		if err != nil {
			t.Fatalf("%s: version: %v", name, err)
		}

		if got := v.Messages[0].Version.GoVersion; got != want {
			t.Errorf("%s: GoVersion %q, want %q", name, got, want)
		}
	}

	if constants.GoVersion != "go1.26.8" {
		t.Errorf("machinery's constants.GoVersion is %s: the sim's table says go1.26.8 for v1.14.1; update it", constants.GoVersion)
	}
}

// SecurityState exists in the runtime namespace on every machine, as
// SecurityStateController writes it once machined runs (base/api.go
// Capabilities waits for it); HostnameStatus names the node; a control
// plane's etcd Member "local" holds its member ID once etcd runs healthy,
// the ID and hostname EtcdMemberList reports (EtcdSuite/TestMembers).
func TestLocalResources(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
	)
	c := admin(t, f.Machine("cp-1").Addr())

	st, err := safe.StateWatchFor[*runtime.SecurityState](ctxTimeout(t, 5*time.Second), c.COSI,
		runtime.NewSecurityStateSpec(runtime.NamespaceName).Metadata())
	if err != nil {
		t.Fatalf("security state: %v", err)
	}

	spec := st.TypedSpec()
	if spec.SecureBoot || spec.BootedWithUKI || spec.SELinuxState != runtime.SELinuxStatePermissive || spec.FIPSState != runtime.FIPSStateDisabled {
		t.Errorf("security state %+v: want a metal machine without Secure Boot, SELinux permissive, FIPS disabled", spec)
	}

	hs, err := safe.StateGetByID[*network.HostnameStatus](t.Context(), c.COSI, network.HostnameID)
	if err != nil || hs.TypedSpec().Hostname != "cp-1" {
		t.Errorf("hostname status: %v, %v; want cp-1", hs, err)
	}

	if _, err := safe.StateGetByID[*etcd.Member](t.Context(), c.COSI, etcd.LocalMemberID); !state.IsNotFoundError(err) {
		t.Errorf("etcd member before bootstrap: %v, want not found", err)
	}

	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatal(err)
	}

	mem, err := safe.StateWatchFor[*etcd.Member](ctxTimeout(t, 10*time.Second), c.COSI,
		etcd.NewMember(etcd.NamespaceName, etcd.LocalMemberID).Metadata(), state.WithEventTypes(state.Created, state.Updated))
	if err != nil {
		t.Fatalf("etcd member after bootstrap: %v", err)
	}

	list, err := c.EtcdMemberList(t.Context(), &machine.EtcdMemberListRequest{})
	if err != nil {
		t.Fatal(err)
	}

	if ms := list.Messages[0].Members; len(ms) != 1 || etcd.FormatMemberID(ms[0].Id) != mem.TypedSpec().MemberID || ms[0].Hostname != hs.TypedSpec().Hostname {
		t.Errorf("member list %v, want the one member %s named %s", ms, mem.TypedSpec().MemberID, hs.TypedSpec().Hostname)
	}
}

// A machine config of 11 MiB (a third of constants.GRPCMaxMessageSize, as
// ApidSuite/TestBigPayload sends) applies through a control plane's apid
// to another node and reads back byte for byte; one above 32 MiB is
// refused as gRPC refuses it (ResourceExhausted), which proves the limit
// is Talos' and not gRPC's 4 MiB default.
func TestBigMachineConfig(t *testing.T) {
	t.Parallel()

	cp, w := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp},
		sim.MachineSpec{Name: "worker-1", Role: "worker", Config: w},
	)
	c := admin(t, f.Machine("cp-1").Addr())
	ctx := client.WithNode(t.Context(), "worker-1")

	const line = "# this is a comment line added to make the config bigger and bigger and bigger and bigger all the way\n"
	big := append(append([]byte{}, w...), bytes.Repeat([]byte(line), constants.GRPCMaxMessageSize/3/len(line)+1)...)

	if _, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: big, Mode: machine.ApplyConfigurationRequest_NO_REBOOT}); err != nil {
		t.Fatalf("apply an %d-byte config: %v", len(big), err)
	}

	for range 2 {
		mc, err := safe.StateGetByID[*config.MachineConfig](ctx, c.COSI, config.ActiveID)
		if err != nil {
			t.Fatalf("read the big config back: %v", err)
		}

		got, err := mc.Container().Bytes()
		if err != nil {
			t.Fatal(err)
		}

		if !bytes.Equal(got, big) {
			t.Fatalf("config read back: %d bytes, want the %d applied", len(got), len(big))
		}
	}

	huge := append(append([]byte{}, w...), bytes.Repeat([]byte(line), constants.GRPCMaxMessageSize/len(line)+1)...)

	_, err := c.ApplyConfiguration(ctx, &machine.ApplyConfigurationRequest{Data: huge, Mode: machine.ApplyConfigurationRequest_NO_REBOOT})
	if client.StatusCode(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Errorf("apply a %d-byte config: %v, want ResourceExhausted, larger than max", len(huge), err)
	}
}

// A dry run does not keep a config applied in try mode on Talos 1.14 (it
// is rolled back when its time is up), while up to 1.13 any apply but a
// try, a dry run included, keeps it (v1alpha1_server.go
// ApplyConfiguration of each release; ApplyConfigSuite/TestApplyTry).
func TestDryRunAndATriedConfig(t *testing.T) {
	t.Parallel()

	cp, _ := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "v114", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "v111", Role: "controlplane", Config: cp, TalosVersion: "v1.11.0"},
	)
	tried := patch(t, cp, "machine:\n  sysctls:\n    fs.file-max: \"500000\"\n")

	for name, kept := range map[string]bool{"v114": false, "v111": true} {
		c := admin(t, f.Machine(name).Addr())

		if _, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{
			Data: tried, Mode: machine.ApplyConfigurationRequest_TRY, TryModeTimeout: durationpb.New(300 * time.Millisecond),
		}); err != nil {
			t.Fatalf("%s: try: %v", name, err)
		}

		if _, err := c.ApplyConfiguration(t.Context(), &machine.ApplyConfigurationRequest{
			Data: cp, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true,
		}); err != nil {
			t.Fatalf("%s: dry run: %v", name, err)
		}

		time.Sleep(time.Second) // past the try's timeout

		mc, err := safe.StateGetByID[*config.MachineConfig](t.Context(), c.COSI, config.ActiveID)
		if err != nil {
			t.Fatal(err)
		}

		if _, has := mc.Config().Machine().Sysctls()["fs.file-max"]; has != kept {
			t.Errorf("%s: tried config still active after its timeout and a dry run: %v, want %v", name, has, kept)
		}
	}
}

// Below Talos 1.13 maintenance mode is a gRPC server of its own with
// gRPC's 4 MiB default (v1.11.0 controllers/runtime/maintenance_service.go
// Run, factory.NewServer without MaxRecvMsgSize); from 1.13 machined
// serves it with constants.GRPCMaxMessageSize. A 5 MiB config sent to a
// machine in maintenance mode is refused by the one and taken by the
// other.
func TestMaintenanceMessageLimitPerRelease(t *testing.T) {
	t.Parallel()

	_, w := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "old", TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "new", TalosVersion: "v1.14.1"},
	)

	const line = "# a comment line that makes the config bigger, and bigger, and bigger, and bigger, all the way\n"
	big := append(append([]byte{}, w...), bytes.Repeat([]byte(line), (5<<20)/len(line)+1)...)
	req := &machine.ApplyConfigurationRequest{Data: big, Mode: machine.ApplyConfigurationRequest_AUTO, DryRun: true}

	_, err := insecure(t, f.Machine("old").Addr()).ApplyConfiguration(t.Context(), req)
	if client.StatusCode(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") || !strings.Contains(err.Error(), "4194304") {
		t.Errorf("v1.11.0 in maintenance mode, a %d-byte config: %v, want ResourceExhausted, larger than max (… vs. 4194304)", len(big), err)
	}

	if _, err := insecure(t, f.Machine("new").Addr()).ApplyConfiguration(t.Context(), req); client.StatusCode(err) == codes.ResourceExhausted {
		t.Errorf("v1.14.1 in maintenance mode refused a %d-byte config: %v; its machined takes 32 MiB", len(big), err)
	}
}
