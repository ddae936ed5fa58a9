package sim_test

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"

	"devata.dev/devata/sim"
)

const (
	installer1110 = "ghcr.io/siderolabs/installer:v1.11.0"
	installer1106 = "ghcr.io/siderolabs/installer:v1.10.6"
)

var uuidV4 = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func upgrade(t *testing.T, c *client.Client, req *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	t.Helper()

	return c.MachineClient.Upgrade(ctxTimeout(t, 10*time.Second), req)
}

// tag is what Version reports, or the call's error.
func tag(t *testing.T, c *client.Client) (string, error) {
	t.Helper()

	resp, err := c.Version(ctxTimeout(t, time.Second))
	if err != nil {
		return "", err
	}

	return resp.Messages[0].Version.Tag, nil
}

func stage(t *testing.T, c *client.Client) (runtime.MachineStage, bool, error) {
	t.Helper()

	ms, err := safe.StateGet[*runtime.MachineStatus](ctxTimeout(t, time.Second), c.COSI, runtime.NewMachineStatus().Metadata())
	if err != nil {
		return 0, false, err
	}

	return ms.TypedSpec().Stage, ms.TypedSpec().Status.Ready, nil
}

// until polls f every 10ms for up to 10s; f reports done.
func until(t *testing.T, what string, f func() (bool, error)) {
	t.Helper()

	eventually(t, what, func() error {
		done, err := f()
		if err == nil && !done {
			err = errors.New("not yet")
		}

		return err
	})
}

// The upgrade sequence (v1alpha1_sequencer.go Upgrade): the ack, then the
// node keeps answering on its old version in stage upgrading while it
// drains and stops its services, goes away for the reboot, and comes back
// on the installer's version with its config.
func TestUpgrade(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		RebootDelay:  300 * time.Millisecond,
		UpgradeDelay: time.Second,
		Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.10.6"}},
	})
	m := f.Machine("w-1")
	c := admin(t, m.Addr())

	// the config names no machine.install.image: the installer of the
	// running version (images.DefaultInstallerImage)
	if got := m.Observe().InstallImage; got != installer1106 {
		t.Errorf("install image at start = %q, want %q", got, installer1106)
	}

	resp, err := upgrade(t, c, &machine.UpgradeRequest{Image: installer1110})
	if err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	if len(resp.Messages) != 1 || resp.Messages[0].Ack != "Upgrade request received" || !uuidV4.MatchString(resp.Messages[0].ActorId) || resp.Messages[0].Metadata != nil {
		t.Errorf("reply = %v, want one message: the ack and a UUID actor ID", resp.Messages)
	}

	reboots := m.Observe().Reboots

	// still up, still the old version, stage upgrading and ready
	// (getReadinessChecks has no checks in that stage)
	st, ready, err := stage(t, c)
	if got, _ := tag(t, c); err != nil || st != runtime.MachineStageUpgrading || !ready || got != "v1.10.6" {
		t.Errorf("during the upgrade: stage %s ready %t (%v), version %q; want upgrading, ready, v1.10.6", st, ready, err, got)
	}

	// a reboot cannot take over an upgrade sequence: acked, not done
	if err := c.Reboot(ctxTimeout(t, time.Second)); err != nil || m.Observe().Reboots != reboots {
		t.Errorf("reboot during the upgrade: %v, reboots %d -> %d; want acked and ignored", err, reboots, m.Observe().Reboots)
	}

	// after the drain the kubelet is stopped
	until(t, "kubelet stops", func() (bool, error) {
		svcs, err := c.ServiceInfo(ctxTimeout(t, time.Second), "kubelet")
		if err != nil {
			return false, err
		}

		return len(svcs) == 1 && svcs[0].Service.State == "Finished", nil
	})

	until(t, "the node goes away", func() (bool, error) {
		_, err := tag(t, c)

		return client.StatusCode(err) == codes.Unavailable, nil
	})

	until(t, "the node comes back on v1.11.0", func() (bool, error) {
		got, err := tag(t, c)

		return got == "v1.11.0", err
	})

	v, err := safe.StateGet[*runtime.Version](ctxTimeout(t, time.Second), c.COSI, runtime.NewVersion().Metadata())
	if err != nil || v.TypedSpec().Version != "v1.11.0" {
		t.Errorf("runtime.Version = %v, %v; want v1.11.0", v, err)
	}

	if active, persisted := activeAndPersisted(t, c, wk); !active || !persisted {
		t.Errorf("config after the upgrade: active %t, persisted %t; want both kept", active, persisted)
	}

	obs := m.Observe()
	if obs.InstallImage != installer1110 || obs.TalosVersion != "v1.11.0" || obs.Upgrading || obs.Reboots != reboots+1 {
		t.Errorf("observed %+v, want v1.11.0 from %s after one reboot", obs, installer1110)
	}

	until(t, "running", func() (bool, error) {
		st, _, err := stage(t, c)

		return st == runtime.MachineStageRunning, err
	})
}

// Talos' Upgrade handler refuses no version: a downgrade installs and
// boots like any upgrade.
func TestUpgradeDowngrade(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Config: wk})
	c := admin(t, f.Machine("w-1").Addr())

	if _, err := upgrade(t, c, &machine.UpgradeRequest{Image: installer1106, RebootMode: machine.UpgradeRequest_POWERCYCLE}); err != nil {
		t.Fatalf("downgrade: %v", err)
	}

	until(t, "the node comes back on v1.10.6", func() (bool, error) {
		got, err := tag(t, c)

		return got == "v1.10.6", err
	})
}

// StageUpgrade only reboots; the install sequence of the next boot runs
// the installer and reboots again into the new version.
func TestUpgradeStaged(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		UpgradeDelay: 200 * time.Millisecond,
		Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.10.6"}},
	})
	m := f.Machine("w-1")
	c := admin(t, m.Addr())
	reboots := m.Observe().Reboots

	resp, err := upgrade(t, c, &machine.UpgradeRequest{Image: installer1110, Stage: true})
	if err != nil || len(resp.Messages) != 1 || resp.Messages[0].Ack != "Upgrade request received" {
		t.Fatalf("staged upgrade: %v, %v", resp, err)
	}

	if obs := m.Observe(); !obs.Down || obs.TalosVersion != "v1.10.6" {
		t.Errorf("right after a staged upgrade: %+v, want rebooting, still on v1.10.6", obs)
	}

	until(t, "the node comes back on v1.11.0", func() (bool, error) {
		got, err := tag(t, c)

		return got == "v1.11.0", err
	})

	if obs := m.Observe(); obs.Reboots != reboots+2 || obs.InstallImage != installer1110 {
		t.Errorf("after the staged upgrade: %+v, want two reboots (the staged one, the install's) and %s", obs, installer1110)
	}
}

// install.PullAndValidateInstallerImage: a reference that does not parse,
// or an image the registry does not have, fails the call with machined's
// error (a plain error: Unknown) and nothing happens.
func TestUpgradeImageErrors(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Config: wk})
	m := f.Machine("w-1")
	m.SetFaults(sim.Faults{UpgradeImagesMissing: []string{"registry.example.com/installer"}})
	c := admin(t, m.Addr())

	notFound := func(ref string) string {
		return fmt.Sprintf("1 error(s) occurred:\n\tfailed to pull image %q: failed to resolve reference %q: %s: not found", ref, ref, ref)
	}

	for _, tc := range []struct{ image, want string }{
		{"ghcr.io/siderolabs/Installer:v1.11.0", `failed to parse image reference "ghcr.io/siderolabs/Installer:v1.11.0": invalid reference format: repository name (siderolabs/Installer) must be lowercase`},
		{"", `failed to parse image reference "": invalid reference format`},
		{"ghcr.io/siderolabs/installer:v1.11.0@sha256:0123", `failed to parse image reference "ghcr.io/siderolabs/installer:v1.11.0@sha256:0123": invalid reference format`},
		{"ghcr.io/siderolabs/installer@sha256:" + strings.Repeat("ab", 20), `failed to parse image reference "ghcr.io/siderolabs/installer@sha256:` + strings.Repeat("ab", 20) + `": invalid checksum digest length`},
		{"ghcr.io/siderolabs/installer:latest", notFound("ghcr.io/siderolabs/installer:latest")},
		{"installer", notFound("docker.io/library/installer:latest")},
		{"registry.example.com/installer:v1.11.1", notFound("registry.example.com/installer:v1.11.1")},
	} {
		t.Run(tc.image, func(t *testing.T) {
			_, err := upgrade(t, c, &machine.UpgradeRequest{Image: tc.image})

			want := fmt.Sprintf("error validating installer image %q: %s", tc.image, tc.want)
			if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), "desc = "+want) {
				t.Errorf("upgrade: %v\nwant Unknown: %s", err, want)
			}
		})
	}

	if obs := m.Observe(); obs.Upgrading || obs.Reboots != 0 || obs.InstallImage != installer1110 {
		t.Errorf("after refused upgrades: %+v, want nothing changed", obs)
	}
}

func TestUpgradeRefusedInMaintenanceAndToNonAdmins(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "w-1", Config: wk},
		sim.MachineSpec{Name: "w-2"},
	)

	// maintenance/server.go Upgrade: assertAdminRole, and its callers are
	// os:reader
	_, err := upgrade(t, insecure(t, f.Machine("w-2").Addr()), &machine.UpgradeRequest{Image: installer1110})
	if client.StatusCode(err) != codes.Unimplemented || !strings.Contains(err.Error(), "API is not implemented in maintenance mode") {
		t.Errorf("upgrade in maintenance mode: %v, want Unimplemented", err)
	}

	// services/machined.go rules: os:admin only
	for _, r := range []role.Role{role.Operator, role.Reader} {
		_, err := upgrade(t, dial(t, role.MakeSet(r), f.Machine("w-1").Addr()), &machine.UpgradeRequest{Image: installer1110})
		checkAllowed(t, "upgrade as "+string(r), err, false)
	}

	if f.Machine("w-1").Observe().Upgrading {
		t.Error("a refused caller started an upgrade")
	}
}

// controlPlanes starts n control planes and a worker on v1.10.6 and
// bootstraps cp-1.
func controlPlanes(t *testing.T, n int, opts sim.Options) *sim.Fleet {
	t.Helper()

	cp, wk := oldFleetConfigs(t)
	for i := range n {
		opts.Machines = append(opts.Machines, sim.MachineSpec{Name: fmt.Sprintf("cp-%d", i+1), Role: "controlplane", Config: cp, TalosVersion: "v1.10.6"})
	}

	opts.Machines = append(opts.Machines, sim.MachineSpec{Name: "w-1", Config: wk, TalosVersion: "v1.10.6"})
	f := startWith(t, opts)

	if err := f.Machine("cp-1").Bootstrap(); err != nil {
		t.Fatalf("bootstrap: %v", err)
	}

	return f
}

func joined(t *testing.T, f *sim.Fleet, n int) {
	t.Helper()

	until(t, "every control plane joins", func() (bool, error) {
		cs := f.EtcdClusters()

		return len(cs) == 1 && len(cs[0].Members) == n && len(cs[0].Learners) == 0, nil
	})
}

func memberIDs(t *testing.T, c *client.Client) map[string]uint64 {
	t.Helper()

	resp, err := c.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{})
	if err != nil {
		t.Fatalf("member list: %v", err)
	}

	ids := map[string]uint64{}
	for _, mem := range resp.Messages[0].Members {
		ids[mem.Hostname] = mem.Id
	}

	return ids
}

// etcd's ValidateForUpgrade on a control plane: every member must be
// started and healthy; force skips the checks, and a worker never makes
// them.
func TestUpgradeControlPlaneNeedsHealthyEtcd(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{UpgradeDelay: time.Hour})
	joined(t, f, 3)

	cp1 := admin(t, f.Machine("cp-1").Addr())
	ids := memberIDs(t, cp1)

	f.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})

	begin := time.Now()
	_, err := upgrade(t, cp1, &machine.UpgradeRequest{Image: installer1110})

	want := fmt.Sprintf("error validating etcd for upgrade: etcd member %016x is not healthy; all members must be healthy to perform an upgrade: context deadline exceeded", ids["cp-3"])
	if client.StatusCode(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), want) || time.Since(begin) < 150*time.Millisecond {
		t.Errorf("upgrade with cp-3 down: %v after %s\nwant DeadlineExceeded after the client's wait: %s", err, time.Since(begin), want)
	}

	if _, err := upgrade(t, admin(t, f.Machine("w-1").Addr()), &machine.UpgradeRequest{Image: installer1110}); err != nil {
		t.Errorf("worker upgrade: %v, want no etcd checks", err)
	}

	if _, err := upgrade(t, cp1, &machine.UpgradeRequest{Image: installer1110, Force: true}); err != nil {
		t.Errorf("forced upgrade: %v", err)
	}

	if !f.Machine("cp-1").Observe().Upgrading {
		t.Error("cp-1 does not upgrade after a forced upgrade")
	}
}

func TestUpgradeEtcdRefusals(t *testing.T) {
	t.Parallel()

	t.Run("before bootstrap", func(t *testing.T) {
		t.Parallel()

		cp, _ := baseConfigs(t)
		f := start(t, sim.MachineSpec{Name: "cp-1", Role: "controlplane", Config: cp})

		_, err := upgrade(t, admin(t, f.Machine("cp-1").Addr()), &machine.UpgradeRequest{Image: installer1110})
		if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), "failed to create etcd client: no controlplane endpoints discovered yet") {
			t.Errorf("upgrade: %v", err)
		}
	})

	t.Run("two members", func(t *testing.T) {
		t.Parallel()

		f := controlPlanes(t, 2, sim.Options{})
		joined(t, f, 2)

		_, err := upgrade(t, admin(t, f.Machine("cp-2").Addr()), &machine.UpgradeRequest{Image: installer1110})
		if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), "error validating etcd for upgrade: etcd member count(2) is insufficient to maintain quorum if upgrade commences") {
			t.Errorf("upgrade: %v", err)
		}
	})

	t.Run("a member not started", func(t *testing.T) {
		t.Parallel()

		// etcd admits one learner at a time (etcd.go joinEtcd): the
		// third member is added once the second was promoted, and is
		// caught while it is a learner that has not started
		f := controlPlanes(t, 3, sim.Options{EtcdJoinDelay: time.Second})
		c := admin(t, f.Machine("cp-1").Addr())

		var resp *machine.EtcdMemberListResponse
		until(t, "two members and a learner not started", func() (bool, error) {
			var err error
			resp, err = c.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{})
			if err != nil {
				return false, err
			}

			ms := resp.Messages[0].Members

			return len(ms) == 3 && ms[2].IsLearner && ms[2].Hostname == "", nil
		})

		_, err := upgrade(t, c, &machine.UpgradeRequest{Image: installer1110})
		want := fmt.Sprintf("etcd member %016x is not started, all members must be running to perform an upgrade", resp.Messages[0].Members[2].Id)
		if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), want) {
			t.Errorf("upgrade: %v\nwant %s", err, want)
		}
	})

	t.Run("no quorum", func(t *testing.T) {
		t.Parallel()

		f := controlPlanes(t, 3, sim.Options{})
		joined(t, f, 3)
		f.Machine("cp-2").SetFaults(sim.Faults{Unreachable: true})
		f.Machine("cp-3").SetFaults(sim.Faults{Unreachable: true})

		_, err := upgrade(t, admin(t, f.Machine("cp-1").Addr()), &machine.UpgradeRequest{Image: installer1110})
		if client.StatusCode(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "failed to acquire upgrade mutex: error establishing etcd concurrency session: context deadline exceeded") {
			t.Errorf("upgrade: %v", err)
		}
	})
}

// tryLockUpgradeMutex holds the mutex only while the checks run: a second
// control plane's Upgrade in that window fails at once, one after it is
// not refused while the first node still drains (its etcd runs), and only
// once the first stopped its etcd does ValidateForUpgrade refuse.
func TestUpgradeMutex(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 4, sim.Options{UpgradeDelay: 3 * time.Second})
	joined(t, f, 4)

	// cp-4 answers etcd's health check slowly: the checks take a while
	f.Machine("cp-4").SetFaults(sim.Faults{Latency: 2 * time.Second})

	cp1, cp2 := admin(t, f.Machine("cp-1").Addr()), admin(t, f.Machine("cp-2").Addr())
	first := make(chan error, 1)

	go func() {
		_, err := cp1.MachineClient.Upgrade(t.Context(), &machine.UpgradeRequest{Image: installer1110})
		first <- err
	}()

	time.Sleep(500 * time.Millisecond)

	_, err := upgrade(t, cp2, &machine.UpgradeRequest{Image: installer1110})
	if client.StatusCode(err) != codes.Unknown || !strings.Contains(err.Error(), "failed to acquire upgrade mutex: error trying to lock etcd upgrade mutex: mutex: Locked by another session") {
		t.Errorf("second upgrade while the first holds the mutex: %v", err)
	}

	if err := <-first; err != nil {
		t.Fatalf("first upgrade: %v", err)
	}

	f.Machine("cp-4").SetFaults(sim.Faults{})

	// cp-1 drains for the first half of the upgrade: its etcd still runs
	if _, err := upgrade(t, cp2, &machine.UpgradeRequest{Image: installer1110}); err != nil {
		t.Errorf("second upgrade during the first's drain: %v, want accepted as Talos does", err)
	}

	until(t, "cp-1 and cp-2 upgraded and back in etcd", func() (bool, error) {
		for _, name := range []string{"cp-1", "cp-2"} {
			if got, err := tag(t, admin(t, f.Machine(name).Addr())); err != nil || got != "v1.11.0" {
				return false, err
			}
		}

		// no leader while cp-1 and cp-2 pass through Preparing after
		// their boots (etcd_join.go): asked again
		resp, err := admin(t, f.Machine("cp-3").Addr()).EtcdMemberList(ctxTimeout(t, 5*time.Second), &machine.EtcdMemberListRequest{})
		if err != nil {
			return false, err
		}

		var names []string

		for _, mem := range resp.Messages[0].Members {
			names = append(names, mem.Hostname)
		}

		slices.Sort(names)

		return slices.Equal(names, []string{"cp-1", "cp-2", "cp-3", "cp-4"}), nil
	})

	// etcd kept its data: the same members, no new cluster
	if cs := f.EtcdClusters(); len(cs) != 1 || len(cs[0].Members) != 4 {
		t.Errorf("etcd after the upgrades: %+v, want the one cluster of four", cs)
	}
}

// Once the upgrade stopped a control plane's etcd, its own etcd calls
// wait as on any node whose etcd does not run, and another control
// plane's Upgrade finds it unhealthy.
func TestUpgradeStopsEtcd(t *testing.T) {
	t.Parallel()

	f := controlPlanes(t, 3, sim.Options{UpgradeDelay: 4 * time.Second})
	joined(t, f, 3)

	cp1 := admin(t, f.Machine("cp-1").Addr())
	ids := memberIDs(t, cp1)

	if _, err := upgrade(t, cp1, &machine.UpgradeRequest{Image: installer1110}); err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	until(t, "cp-1 stops etcd", func() (bool, error) {
		svcs, err := cp1.ServiceInfo(ctxTimeout(t, time.Second), "etcd")
		if err != nil {
			return false, err
		}

		return len(svcs) == 1 && svcs[0].Service.State == "Finished" && svcs[0].Service.Health.LastMessage == "service not running", nil
	})

	if _, err := cp1.EtcdMemberList(ctxTimeout(t, time.Second), &machine.EtcdMemberListRequest{}); client.StatusCode(err) != codes.DeadlineExceeded {
		t.Errorf("member list on cp-1 with etcd stopped: %v, want DeadlineExceeded", err)
	}

	_, err := upgrade(t, admin(t, f.Machine("cp-2").Addr()), &machine.UpgradeRequest{Image: installer1110})

	want := fmt.Sprintf("etcd member %016x is not healthy", ids["cp-1"])
	if client.StatusCode(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), want) {
		t.Errorf("cp-2's upgrade while cp-1's etcd is stopped: %v, want %s", err, want)
	}
}

// When the new version's boot sequence fails, machined reverts the
// bootloader (main.go handle, revertBootloader) and the machine boots the
// version it ran before.
func TestUpgradeBootFailsFallsBack(t *testing.T) {
	t.Parallel()

	const image = "ghcr.io/siderolabs/installer:v1.11.1"

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		RebootDelay: 500 * time.Millisecond,
		Machines:    []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.10.6"}},
	})
	m := f.Machine("w-1")
	m.SetFaults(sim.Faults{UpgradeBootFails: true})

	if _, err := upgrade(t, admin(t, m.Addr()), &machine.UpgradeRequest{Image: image}); err != nil {
		t.Fatalf("upgrade: %v", err)
	}

	// the failing boot answers on the new version, booting, without its
	// services; a client each poll, so that no reconnect backoff skips it
	until(t, "the new version boots", func() (bool, error) {
		c := admin(t, m.Addr())

		got, err := tag(t, c)
		if err != nil || got != "v1.11.1" {
			return false, nil //nolint:nilerr // down or old: keep polling
		}

		st, ready, err := stage(t, c)
		if err != nil || st != runtime.MachineStageBooting || ready {
			return false, fmt.Errorf("stage %s ready %t: %w", st, ready, err)
		}

		if svcs, err := c.ServiceInfo(ctxTimeout(t, time.Second), "kubelet"); err != nil || len(svcs) != 0 {
			return false, fmt.Errorf("kubelet during the failing boot: %v, %w", svcs, err)
		}

		return true, nil
	})

	until(t, "back on v1.10.6 and running", func() (bool, error) {
		c := admin(t, m.Addr())

		got, err := tag(t, c)
		if err != nil || got != "v1.10.6" {
			return false, nil //nolint:nilerr // down, or still the failing boot
		}

		st, _, err := stage(t, c)

		return st == runtime.MachineStageRunning, err
	})

	if obs := m.Observe(); obs.TalosVersion != "v1.10.6" || obs.InstallImage != installer1106 {
		t.Errorf("after the fallback: %+v, want v1.10.6 from the image it was installed from", obs)
	}
}

// A fan-out upgrade acks per node, each message stamped with its node. It
// goes through a control plane's endpoint: a worker's apid forwards
// nothing (route).
func TestUpgradeNodes(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		UpgradeDelay: time.Hour,
		Machines:     []sim.MachineSpec{{Name: "cp-1", Role: "controlplane", Config: cp}, {Name: "w-1", Config: wk}, {Name: "w-2", Config: wk}},
	})
	c := admin(t, f.Machine("cp-1").Addr())

	resp, err := c.MachineClient.Upgrade(client.WithNodes(ctxTimeout(t, 5*time.Second), "w-1", "w-2"), &machine.UpgradeRequest{Image: installer1106})
	if err != nil || len(resp.Messages) != 2 {
		t.Fatalf("upgrade w-1, w-2: %v, %v", resp, err)
	}

	for i, want := range []string{"w-1", "w-2"} {
		msg := resp.Messages[i]
		if msg.Metadata.GetHostname() != want || msg.Ack != "Upgrade request received" || msg.ActorId == resp.Messages[1-i].ActorId {
			t.Errorf("message %d = %v, want %s's ack with its own actor ID", i, msg, want)
		}
	}
}
