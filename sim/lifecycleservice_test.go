package sim_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
	"devata.dev/devata/sim"
)

// The containerd instances talosctl v1.14.1 sends (cmd/talosctl/cmd/talos/
// image.go imageCmdFlagsType.containerdInstance): --namespace system, the
// default of `talosctl upgrade` and `talosctl image pull`, is the CRI
// driver in the system namespace; inmem the system containerd's; cri the
// CRI driver's k8s.io.
var (
	nsSystem = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}
	nsInmem  = &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_SYSTEM}
	nsCRI    = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_CRI}
)

var (
	factory1141 = talos.DefaultInstallImage("v1.14.1")
	factory1142 = talos.DefaultInstallImage("v1.14.2")
	ghcr1139    = talos.GHCRInstaller + ":v1.13.9"
	ghcr1141    = talos.GHCRInstaller + ":v1.14.1"
)

// pulled is what an ImageService.Pull stream brought.
type pulled struct {
	name     string
	progress []*machine.ImageServicePullProgress
}

// pullImage pulls ref as `talosctl image pull` does (imagePullInternal).
func pullImage(ctx context.Context, c *client.Client, in *common.ContainerdInstance, ref string) (pulled, error) {
	stream, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{Containerd: in, ImageRef: ref})
	if err != nil {
		return pulled{}, err
	}

	var out pulled

	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return out, err
		}

		if out.name != "" {
			return out, fmt.Errorf("a message after the name: %v", resp)
		}

		switch r := resp.Response.(type) {
		case *machine.ImageServicePullResponse_Name:
			out.name = r.Name
		case *machine.ImageServicePullResponse_PullProgress:
			out.progress = append(out.progress, r.PullProgress)
		}
	}
}

// installed is what a LifecycleService stream brought: the installer's
// output and its exit code (nil: none came).
type installed struct {
	messages []string
	exit     *int32
}

func (i installed) output() string { return strings.Join(i.messages, "") }

// lifecycleUpgrade asks for an upgrade as `talosctl upgrade` v1.14.1 does
// (upgradeInternal).
func lifecycleUpgrade(ctx context.Context, c *client.Client, in *common.ContainerdInstance, image string) (installed, error) {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: in,
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return installed{}, err
	}

	return readInstall(func() (*machine.LifecycleServiceInstallProgress, error) {
		resp, err := stream.Recv()

		return resp.GetProgress(), err
	})
}

func lifecycleInstall(ctx context.Context, c *client.Client, in *common.ContainerdInstance, image, disk string) (installed, error) {
	stream, err := c.LifecycleClient.Install(ctx, &machine.LifecycleServiceInstallRequest{
		Containerd:  in,
		Source:      &machine.InstallArtifactsSource{ImageName: image},
		Destination: &machine.InstallDestination{Disk: disk},
	})
	if err != nil {
		return installed{}, err
	}

	return readInstall(func() (*machine.LifecycleServiceInstallProgress, error) {
		resp, err := stream.Recv()

		return resp.GetProgress(), err
	})
}

func readInstall(recv func() (*machine.LifecycleServiceInstallProgress, error)) (installed, error) {
	var out installed

	for {
		p, err := recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}

		if err != nil {
			return out, err
		}

		if out.exit != nil {
			return out, fmt.Errorf("a message after the exit code: %v", p)
		}

		switch r := p.Response.(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			out.messages = append(out.messages, r.Message)
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			code := r.ExitCode
			out.exit = &code
		}
	}
}

// wantStatus checks an error's code and message (the status message as a
// whole).
func wantStatus(t *testing.T, what string, err error, code codes.Code, msg string) {
	t.Helper()

	if st, _ := status.FromError(err); err == nil || st.Code() != code || st.Message() != msg {
		t.Errorf("%s: %v\nwant %s: %s", what, err, code, msg)
	}
}

// logLine is a line of the installer's Go log: date and time, then the
// text.
func logLine(text string) string {
	return `\d{4}/\d\d/\d\d \d\d:\d\d:\d\d ` + regexp.QuoteMeta(text) + `\n`
}

// A machine on Talos 1.13 or later upgrades as talosctl v1.14.1 does it
// (upgradeViaLifecycleService): ImageService.Pull of the installer into a
// containerd store (internal/app/images/images.go Pull), then
// LifecycleService.Upgrade from that store (internal/app/lifecycle
// lifecycle.go Upgrade, container.go runInstallerContainer), which runs
// the installer into the other boot partition and neither drains nor
// reboots, then MachineService.Reboot, after which the machine runs the
// new version.
func TestLifecycleUpgrade(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)

	for _, tc := range []struct {
		from, image, to string
		in              *common.ContainerdInstance
	}{
		{"v1.13.9", factory1141, "v1.14.1", nsSystem},
		{"v1.14.1", factory1142, "v1.14.2", nsSystem},
		{"v1.14.1", factory1142, "v1.14.2", nsInmem},
		{"v1.13.0", ghcr1139, "v1.13.9", nsCRI},
	} {
		t.Run(fmt.Sprintf("%s to %s from %s", tc.from, tc.to, tc.in), func(t *testing.T) {
			t.Parallel()

			f := startWith(t, sim.Options{
				UpgradeDelay: 200 * time.Millisecond,
				Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: tc.from}},
			})
			m := f.Machine("w-1")
			c := admin(t, m.Addr())

			p, err := pullImage(ctxTimeout(t, 5*time.Second), c, tc.in, tc.image)
			if err != nil {
				t.Fatalf("pull: %v", err)
			}

			// images.go: the name pinned to its digest; progress per
			// layer, downloading to extracted (progress/pull_progress.go)
			repo, _, _ := strings.Cut(tc.image, ":v")
			if !regexp.MustCompile(`^` + regexp.QuoteMeta(repo) + `@sha256:[0-9a-f]{64}$`).MatchString(p.name) {
				t.Errorf("pulled %q, want %s@sha256:…", p.name, repo)
			}

			if len(p.progress) == 0 || p.progress[len(p.progress)-1].GetProgress().GetStatus() != machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE || len(p.progress[0].GetLayerId()) != 12 {
				t.Errorf("pull progress = %v, want layers (12-digit IDs) downloaded to extracted", p.progress)
			}

			// a second pull finds it in the store: no progress
			// (WithSkipIfAlreadyPulled), the same name
			if again, err := pullImage(ctxTimeout(t, 5*time.Second), c, tc.in, tc.image); err != nil || again.name != p.name || len(again.progress) != 0 {
				t.Errorf("second pull: %+v, %v; want %s without progress", again, err, p.name)
			}

			reboots := m.Observe().Reboots

			up, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, tc.in, tc.image)
			if err != nil || up.exit == nil || *up.exit != 0 {
				t.Fatalf("lifecycle upgrade: %+v, %v; want exit code 0", up, err)
			}

			// cmd/installer: its version, the pre-flight check of the host's
			// version (preflight.go), the end of the install; one message per
			// line, the newline kept (1.14 output.Stream; 1.13 reads the
			// pipe per write, which is a line of the installer's log)
			want := "^" + logLine("running Talos installer "+tc.to) + logLine("running pre-flight checks") +
				logLine("host Talos version: "+tc.from) + logLine("all pre-flight checks successful") +
				logLine("installation of "+tc.to+" complete") + "$"
			if !regexp.MustCompile(want).MatchString(up.output()) || len(up.messages) != 5 {
				t.Errorf("installer output (%d messages):\n%s\nwant the five lines of %s", len(up.messages), up.output(), want)
			}

			// written, not booted: no reboot, no upgrade sequence
			obs := m.Observe()
			if obs.TalosVersion != tc.from || obs.NextVersion != tc.to || obs.Reboots != reboots || obs.Upgrading || obs.Down {
				t.Errorf("after the lifecycle upgrade: %+v, want still up on %s, %s for the next boot", obs, tc.from, tc.to)
			}

			if got, err := tag(t, c); err != nil || got != tc.from {
				t.Errorf("version after the lifecycle upgrade: %q, %v; want %s until the reboot", got, err, tc.from)
			}

			if err := c.Reboot(ctxTimeout(t, time.Second)); err != nil {
				t.Fatalf("reboot: %v", err)
			}

			until(t, "the node comes back on "+tc.to, func() (bool, error) {
				got, err := tag(t, c)

				return got == tc.to, err
			})

			obs = m.Observe()
			if obs.InstallImage != tc.image || obs.TalosVersion != tc.to || obs.NextVersion != "" || obs.Reboots != reboots+1 {
				t.Errorf("after the reboot: %+v, want %s from %s after one reboot", obs, tc.to, tc.image)
			}

			for name, want := range map[string]int{
				"ImageService.Pull": 2, "LifecycleService.Upgrade": 1, "MachineService.Upgrade": 0,
				"MachineService.Reboot": 1, "Upgrade": 1, "/machine.LifecycleService/Upgrade": 1, "Pull": 2,
			} {
				if got := m.Calls(name); got != want {
					t.Errorf("Calls(%q) = %d, want %d", name, got, want)
				}
			}
		})
	}
}

// A Talos below 1.13 has neither ImageService nor LifecycleService: its
// gRPC server answers Unimplemented "unknown service …" before any
// interceptor, so whatever the caller's roles, configured or in
// maintenance mode (talos v1.12.1 and machinery v1.12.4 have no
// image.proto or lifecycle.proto; grpc-go server.go handleStream). The
// calls are counted all the same.
func TestLifecycleUnknownBefore113(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "w-111", Config: wk, TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "w-112", Config: wk, TalosVersion: "v1.12.4"},
		sim.MachineSpec{Name: "m-112", TalosVersion: "v1.12.4"},
	)

	clients := map[string]*client.Client{
		"w-111 admin":  admin(t, f.Machine("w-111").Addr()),
		"w-112 admin":  admin(t, f.Machine("w-112").Addr()),
		"w-112 reader": dial(t, readerRoles, f.Machine("w-112").Addr()),
		"m-112":        insecure(t, f.Machine("m-112").Addr()),
	}

	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			_, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1141)
			wantStatus(t, "pull", err, codes.Unimplemented, "unknown service machine.ImageService")

			_, err = lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1141)
			wantStatus(t, "lifecycle upgrade", err, codes.Unimplemented, "unknown service machine.LifecycleService")

			_, err = lifecycleInstall(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1141, "/dev/sda")
			wantStatus(t, "lifecycle install", err, codes.Unimplemented, "unknown service machine.LifecycleService")
		})
	}

	if n := f.Machine("w-112").Calls("LifecycleService.Upgrade"); n != 2 {
		t.Errorf("Calls(LifecycleService.Upgrade) on w-112 = %d, want 2", n)
	}

	if obs := f.Machine("w-112").Observe(); obs.NextVersion != "" || obs.TalosVersion != "v1.12.4" {
		t.Errorf("w-112 after refused calls: %+v, want nothing changed", obs)
	}
}

// LifecycleService.Upgrade's refusals, in lifecycle.go's order, and
// runInstallerContainer's (Internal "upgrade failed: …"): the containerd
// instance (ctrhelper ContainerdInstanceHelper), then the image by the
// exact name given in that store (GetImage; a pull stores the normalized
// reference, its digest and repository@digest: aliases.go manageAliases).
func TestLifecycleUpgradeRefusals(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		UpgradeDelay: 200 * time.Millisecond,
		Machines: []sim.MachineSpec{
			{Name: "w-114", Config: wk, TalosVersion: "v1.14.1"},
			{Name: "w-113", Config: wk, TalosVersion: "v1.13.9"},
		},
	})
	c114 := admin(t, f.Machine("w-114").Addr())
	c113 := admin(t, f.Machine("w-113").Addr())

	for _, c := range []*client.Client{c114, c113} {
		if _, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsCRI, ghcr1139); err != nil {
			t.Fatalf("pull: %v", err)
		}
	}

	notFound := func(name string) string {
		return fmt.Sprintf("upgrade failed: installer image %q not found in containerd store: image %q: not found", name, name)
	}

	for _, tc := range []struct {
		name  string
		c     *client.Client
		in    *common.ContainerdInstance
		image string
		code  codes.Code
		msg   string
	}{
		{"no image", c114, nsCRI, "", codes.InvalidArgument, "installer image name is required"},
		{"not pulled", c114, nsSystem, factory1141, codes.Internal, notFound(factory1141)},
		{"pulled into another store", c114, nsSystem, ghcr1139, codes.Internal, notFound(ghcr1139)},
		{"pulled into another namespace", c114, nsInmem, ghcr1139, codes.Internal, notFound(ghcr1139)},
		{"not the name it was pulled as", c114, nsCRI, "siderolabs/installer:v1.13.9", codes.Internal, notFound("siderolabs/installer:v1.13.9")},
		{"no containerd instance", c114, nil, ghcr1139, codes.Internal, "upgrade failed: rpc error: code = InvalidArgument desc = invalid containerd namespace NS_UNKNOWN"},
		{"containerd driver, CRI namespace", c114, &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_CRI}, ghcr1139, codes.Internal, "upgrade failed: rpc error: code = InvalidArgument desc = cannot use CRI namespace with containerd driver"},
		{"unknown driver", c114, &common.ContainerdInstance{Driver: 7, Namespace: common.ContainerdNamespace_NS_SYSTEM}, ghcr1139, codes.Internal, "upgrade failed: rpc error: code = InvalidArgument desc = invalid containerd driver 7"},
		// Talos 1.13's ctrhelper knows two namespaces, and its enum has no
		// name for the third
		{"1.13, taloscontainers", c113, &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_TALOSCONTAINERS}, ghcr1139, codes.Internal, "upgrade failed: rpc error: code = InvalidArgument desc = invalid containerd namespace 3"},
		{"1.14, taloscontainers", c114, &common.ContainerdInstance{Driver: common.ContainerDriver_CONTAINERD, Namespace: common.ContainerdNamespace_NS_TALOSCONTAINERS}, ghcr1139, codes.Internal, notFound(ghcr1139)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), tc.c, tc.in, tc.image)
			wantStatus(t, "lifecycle upgrade", err, tc.code, tc.msg)
		})
	}

	// the names a pull leaves are found: the reference, repository@digest
	// (what the pull's reply names), the bare digest
	p, err := pullImage(ctxTimeout(t, 5*time.Second), c114, nsCRI, ghcr1139)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}

	_, digest, _ := strings.Cut(p.name, "@")

	for _, name := range []string{p.name, digest, ghcr1139} {
		if up, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c114, nsCRI, name); err != nil || up.exit == nil || *up.exit != 0 {
			t.Errorf("upgrade from %s: %+v, %v; want exit code 0", name, up, err)
		}
	}

	for _, m := range f.Machines() {
		if obs := m.Observe(); obs.Reboots != 0 || obs.Upgrading {
			t.Errorf("%s: %+v, want no reboot and no upgrade sequence", m.Name(), obs)
		}
	}
}

// services/machined.go rules (v1.13.9, v1.14.1): LifecycleService is
// os:admin's, ImageService.Pull os:admin's and os:operator's. In Talos
// 1.13's maintenance mode the caller is os:reader
// (ReadOnlyWithAdminOnSiderolink), so neither is served there.
func TestLifecycleRoles(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "m-1", TalosVersion: "v1.14.1"},
	)

	for _, tc := range []struct {
		c             *client.Client
		who           string
		pull, upgrade bool
	}{
		{admin(t, f.Machine("w-1").Addr()), "admin", true, true},
		{dial(t, role.MakeSet(role.Operator), f.Machine("w-1").Addr()), "operator", true, false},
		{dial(t, readerRoles, f.Machine("w-1").Addr()), "reader", false, false},
		{insecure(t, f.Machine("m-1").Addr()), "maintenance", false, false},
	} {
		_, err := pullImage(ctxTimeout(t, 5*time.Second), tc.c, nsSystem, factory1141)
		checkAllowed(t, "pull as "+tc.who, err, tc.pull)

		_, err = lifecycleUpgrade(ctxTimeout(t, 5*time.Second), tc.c, nsSystem, factory1141)
		checkAllowed(t, "lifecycle upgrade as "+tc.who, err, tc.upgrade)

		_, err = lifecycleInstall(ctxTimeout(t, 5*time.Second), tc.c, nsSystem, factory1141, "/dev/sda")
		if tc.upgrade {
			wantStatus(t, "lifecycle install as "+tc.who, err, codes.AlreadyExists, "machine is already installed")
		} else {
			checkAllowed(t, "lifecycle install as "+tc.who, err, false)
		}
	}
}

// Service.lock: one installer at a time per machine; the lock is
// machined's, so a reboot frees it. A reboot while the installer runs
// kills it: nothing is written.
func TestLifecycleLock(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		UpgradeDelay: 2 * time.Second,
		Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"}},
	})
	m := f.Machine("w-1")
	c := admin(t, m.Addr())

	if _, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142); err != nil {
		t.Fatalf("pull: %v", err)
	}

	var (
		wg    sync.WaitGroup
		first installed
		err   error
	)

	wg.Go(func() { first, err = lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142) })

	// counted as it reaches the machine, locked a moment later; the
	// installer then runs for a second
	until(t, "the first installer runs", func() (bool, error) { return m.Calls("LifecycleService.Upgrade") == 1, nil })
	time.Sleep(100 * time.Millisecond)

	for _, call := range []func() error{
		func() error {
			_, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142)
			return err
		},
		func() error {
			_, err := lifecycleInstall(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142, "/dev/sda")
			return err
		},
	} {
		wantStatus(t, "while an installer runs", call(), codes.FailedPrecondition, "another installation/upgrade is already in progress")
	}

	wg.Wait()

	if err != nil || first.exit == nil || *first.exit != 0 {
		t.Fatalf("first upgrade: %+v, %v", first, err)
	}

	// the machine goes down while the installer runs: the stream breaks,
	// the partition is not written, the next boot's machined is unlocked
	wg.Go(func() { _, err = lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142) })

	until(t, "the second installer runs", func() (bool, error) { return m.Calls("LifecycleService.Upgrade") == 3, nil })
	m.Crash()
	wg.Wait()

	if err == nil {
		t.Error("an upgrade whose machine went down ended well")
	}

	until(t, "the node comes back", func() (bool, error) {
		_, err := tag(t, c)

		return err == nil, nil
	})

	// the first upgrade's partition was written; the crash booted it
	if obs := m.Observe(); obs.TalosVersion != "v1.14.2" || obs.NextVersion != "" {
		t.Errorf("after the crash: %+v, want v1.14.2 (the first installer's), nothing next", obs)
	}

	// the system namespace of the CRI containerd kept its image
	if _, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142); err != nil {
		t.Errorf("upgrade after the reboot: %v, want the lock free and the image still there", err)
	}
}

// The system containerd keeps its images in a tmpfs (services/
// containerd.go: --root /system/var/lib/containerd), the CRI containerd
// on EPHEMERAL (/var/lib/containerd): after a reboot an image pulled
// into the first is gone, one pulled into the second is not.
func TestLifecycleImagesAcrossReboots(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"})
	m := f.Machine("w-1")
	c := admin(t, m.Addr())

	for _, in := range []*common.ContainerdInstance{nsInmem, nsSystem} {
		if _, err := pullImage(ctxTimeout(t, 5*time.Second), c, in, factory1142); err != nil {
			t.Fatalf("pull: %v", err)
		}
	}

	if err := c.Reboot(ctxTimeout(t, time.Second)); err != nil {
		t.Fatalf("reboot: %v", err)
	}

	until(t, "the node comes back", func() (bool, error) {
		_, err := tag(t, c)

		return err == nil && m.Observe().Reboots == 1, nil
	})

	_, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsInmem, factory1142)
	wantStatus(t, "upgrade from the system containerd", err, codes.Internal,
		fmt.Sprintf("upgrade failed: installer image %q not found in containerd store: image %q: not found", factory1142, factory1142))

	if up, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142); err != nil || up.exit == nil || *up.exit != 0 {
		t.Errorf("upgrade from the CRI containerd: %+v, %v; want exit code 0", up, err)
	}
}

// The installer's pre-flight check (cmd/installer/pkg/install
// preflight.go): compatibility's UpgradeableFrom for the installer's
// version, from the host's. A refusal is the installer's own exit: its
// error on the last line, exit code 4 from Talos 1.14's installer
// (pkg/installer/exitcode ExitEnvironment), 1 before; the call ends OK
// (lifecycle.proto: the client judges the exit code) and nothing is
// written.
func TestLifecyclePreflight(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)

	for _, tc := range []struct {
		host, image string
		exit        int32
		msg         string
	}{
		// talos112.MaximumHostDowngradeVersion is 1.14.0
		{"v1.14.1", talos.GHCRInstaller + ":v1.12.4", 1, "host version 1.14.1 is too new to downgrade to Talos 1.12.4"},
		// talos114.MaximumHostDowngradeVersion is 1.16.0
		{"v1.17.0", factory1141, 4, "host version 1.17.0 is too new to downgrade to Talos 1.14.1"},
	} {
		t.Run(tc.host+" "+tc.image, func(t *testing.T) {
			t.Parallel()

			f := start(t, sim.MachineSpec{Name: "w-1", Config: wk, TalosVersion: tc.host})
			m := f.Machine("w-1")
			c := admin(t, m.Addr())

			if _, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, tc.image); err != nil {
				t.Fatalf("pull: %v", err)
			}

			up, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, tc.image)
			if err != nil || up.exit == nil || *up.exit != tc.exit {
				t.Fatalf("lifecycle upgrade: %+v, %v; want exit code %d", up, err, tc.exit)
			}

			if last := up.messages[len(up.messages)-1]; last != "pre-flight checks failed: "+tc.msg+"\n" {
				t.Errorf("last line %q, want the pre-flight error: %s", last, tc.msg)
			}

			if obs := m.Observe(); obs.NextVersion != "" || obs.TalosVersion != tc.host {
				t.Errorf("after a refused install: %+v, want nothing written", obs)
			}
		})
	}
}

// Talos stopped publishing ghcr.io/siderolabs/installer with 1.14 (talos
// #13138; 1.14's default installer is the Image Factory's, pkg/images
// v1.14.1): a pull of one fails as containerd's resolver does, on every
// path, and so does any tag that is not a Talos version. ImageService.Pull
// answers NotFound "error pulling image: …" (images.go Pull; 1.13's Pull
// retries and returns go-retry's error set, 1.14's does not); the legacy
// Upgrade its plain error (install.PullAndValidateInstallerImage).
func TestInstallerPullNotFound(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "w-111", Config: wk, TalosVersion: "v1.11.0"},
		sim.MachineSpec{Name: "w-113", Config: wk, TalosVersion: "v1.13.9"},
		sim.MachineSpec{Name: "w-114", Config: wk, TalosVersion: "v1.14.1"},
	)

	resolveFailed := func(ref string) string {
		return fmt.Sprintf("failed to pull image %q: failed to resolve reference %q: %s: not found", ref, ref, ref)
	}

	for _, ref := range []string{ghcr1141, talos.GHCRInstaller + ":v1.15.0-alpha.0", factory1141[:strings.LastIndex(factory1141, ":")] + ":latest"} {
		t.Run(ref, func(t *testing.T) {
			for _, name := range []string{"w-113", "w-114"} {
				_, err := pullImage(ctxTimeout(t, 5*time.Second), admin(t, f.Machine(name).Addr()), nsSystem, ref)

				want := "error pulling image: " + resolveFailed(ref)
				if name == "w-113" {
					want = "error pulling image: 1 error(s) occurred:\n\t" + resolveFailed(ref)
				}

				wantStatus(t, "pull on "+name, err, codes.NotFound, want)
			}

			for _, name := range []string{"w-111", "w-113", "w-114"} {
				_, err := upgrade(t, admin(t, f.Machine(name).Addr()), &machine.UpgradeRequest{Image: ref})
				wantStatus(t, "legacy upgrade on "+name, err, codes.Unknown,
					fmt.Sprintf("error validating installer image %q: 1 error(s) occurred:\n\t%s", ref, resolveFailed(ref)))
			}
		})
	}

	// a reference that does not parse: machined's plain error
	_, err := pullImage(ctxTimeout(t, 5*time.Second), admin(t, f.Machine("w-114").Addr()), nsSystem, "ghcr.io/siderolabs/Installer:v1.13.9")
	wantStatus(t, "pull of a bad reference", err, codes.Unknown,
		`failed to parse image reference "ghcr.io/siderolabs/Installer:v1.13.9": invalid reference format: repository name (siderolabs/Installer) must be lowercase`)

	for _, m := range f.Machines() {
		if obs := m.Observe(); obs.Upgrading || obs.NextVersion != "" || obs.Reboots != 0 {
			t.Errorf("%s: %+v, want nothing changed", m.Name(), obs)
		}
	}

	// ghcr.io has 1.13; the Image Factory has 1.14
	c := admin(t, f.Machine("w-114").Addr())

	for _, tc := range []struct{ ref, version string }{{ghcr1139, "v1.13.9"}, {factory1141, "v1.14.1"}} {
		if _, err := upgrade(t, c, &machine.UpgradeRequest{Image: tc.ref}); err != nil {
			t.Errorf("legacy upgrade to %s: %v", tc.ref, err)
		}

		until(t, "w-114 on "+tc.version, func() (bool, error) {
			got, err := tag(t, c)

			return got == tc.version, err
		})
	}
}

// apid's Director from Talos 1.13 fans out only MachineService,
// ClusterService, InspectService, StorageService and TimeService
// (director.go in v1.13.9 and v1.14.1); 1.11 and 1.12 refuse only COSI.
// It is the endpoint's apid that decides; the target's machined decides
// whether it has the service.
func TestLifecycleRouting(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	f := start(t,
		sim.MachineSpec{Name: "cp-114", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "cp-112", Role: "controlplane", Config: cp, TalosVersion: "v1.12.4"},
		sim.MachineSpec{Name: "w-114", Config: wk, TalosVersion: "v1.14.1"},
		sim.MachineSpec{Name: "w-112", Config: wk, TalosVersion: "v1.12.4"},
	)
	c114 := admin(t, f.Machine("cp-114").Addr())
	c112 := admin(t, f.Machine("cp-112").Addr())

	nodes := client.WithNodes(ctxTimeout(t, 5*time.Second), "w-114", "cp-114")

	_, err := pullImage(nodes, c114, nsSystem, factory1141)
	wantStatus(t, "pull with nodes", err, codes.InvalidArgument, "one-2-many proxying is not supported for method /machine.ImageService/Pull")

	_, err = lifecycleUpgrade(nodes, c114, nsSystem, factory1141)
	wantStatus(t, "lifecycle upgrade with nodes", err, codes.InvalidArgument, "one-2-many proxying is not supported for method /machine.LifecycleService/Upgrade")

	if _, err = c114.Version(nodes); err != nil {
		t.Errorf("version with nodes through 1.14: %v", err)
	}

	_, err = safe.StateGet[*runtime.MachineStatus](nodes, c114.COSI, runtime.NewMachineStatus().Metadata())
	wantStatus(t, "COSI with nodes through 1.14", err, codes.InvalidArgument, "one-2-many proxying is not supported for method /cosi.resource.State/Get")

	_, err = safe.StateGet[*runtime.MachineStatus](client.WithNodes(ctxTimeout(t, 5*time.Second), "w-114", "cp-114"), c112.COSI, runtime.NewMachineStatus().Metadata())
	wantStatus(t, "COSI with nodes through 1.12", err, codes.InvalidArgument, "one-2-many proxying is not supported for COSI methods")

	// one target: the target's Talos has the service or not
	for _, tc := range []struct {
		c      *client.Client
		target string
		ok     bool
	}{
		{c114, "w-114", true}, {c114, "w-112", false}, {c112, "w-114", true}, {c112, "w-112", false},
	} {
		p, err := pullImage(client.WithNode(ctxTimeout(t, 5*time.Second), tc.target), tc.c, nsSystem, factory1141)
		if tc.ok && (err != nil || p.name == "") {
			t.Errorf("pull on %s: %+v, %v", tc.target, p, err)
		}

		if !tc.ok {
			wantStatus(t, "pull on "+tc.target, err, codes.Unimplemented, "unknown service machine.ImageService")
		}
	}

	if n := f.Machine("w-114").Calls("ImageService.Pull"); n != 2 {
		t.Errorf("w-114 served %d pulls, want 2", n)
	}
}

// MachineService.Upgrade from Talos 1.13 (v1alpha1_server.go Upgrade,
// v1.13.9, v1.14.1): FailedPrecondition "Talos is not installed" before
// anything else, and a preserve upgrade of a control plane skips etcd's
// checks as a forced one does.
func TestLegacyUpgradeOn113(t *testing.T) {
	t.Parallel()

	cp, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		UpgradeDelay: time.Hour,
		Machines: []sim.MachineSpec{
			{Name: "cp-112", Role: "controlplane", Config: cp, TalosVersion: "v1.12.4"},
			{Name: "cp-114", Role: "controlplane", Config: cp, TalosVersion: "v1.14.1"},
			{Name: "w-112", Config: wk, TalosVersion: "v1.12.4"},
			{Name: "w-114", Config: wk, TalosVersion: "v1.14.1"},
		},
	})

	// no etcd anywhere: the checks fail before any etcd client exists
	_, err := upgrade(t, admin(t, f.Machine("cp-112").Addr()), &machine.UpgradeRequest{Image: factory1141, Preserve: true})
	wantStatus(t, "preserve upgrade on 1.12", err, codes.Unknown, "failed to create etcd client: no controlplane endpoints discovered yet")

	if _, err := upgrade(t, admin(t, f.Machine("cp-114").Addr()), &machine.UpgradeRequest{Image: factory1142, Preserve: true}); err != nil {
		t.Errorf("preserve upgrade on 1.14: %v, want the checks skipped", err)
	}

	for _, name := range []string{"w-112", "w-114"} {
		f.Machine(name).SetInstalled(false)
	}

	_, err = upgrade(t, admin(t, f.Machine("w-114").Addr()), &machine.UpgradeRequest{Image: talos.GHCRInstaller + ":no-such-tag"})
	wantStatus(t, "upgrade of 1.14 not installed", err, codes.FailedPrecondition, "Talos is not installed")

	// Talos 1.12 has no such check: the pull comes first
	_, err = upgrade(t, admin(t, f.Machine("w-112").Addr()), &machine.UpgradeRequest{Image: factory1141})
	if err != nil {
		t.Errorf("upgrade of 1.12 not installed: %v, want acked", err)
	}
}

// LifecycleService on a machine whose disk holds no install: Upgrade
// refuses it, Install checks its image and its disk (lifecycle.go Install;
// filepath.EvalSymlinks' error for a disk the node does not have), then
// installs; the next boot runs what it installed.
func TestLifecycleNotInstalled(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		UpgradeDelay: 200 * time.Millisecond,
		Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"}},
	})
	m := f.Machine("w-1")
	m.SetInstalled(false)
	c := admin(t, m.Addr())

	_, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142)
	wantStatus(t, "upgrade", err, codes.FailedPrecondition, "machine is not installed")

	for _, tc := range []struct{ image, disk, code, msg string }{
		{"", "/dev/sda", "InvalidArgument", "installer image name is required"},
		{factory1142, "", "InvalidArgument", "destination disk is required"},
		{factory1142, "/dev/sdx", "InvalidArgument", "invalid disk path: lstat /dev/sdx: no such file or directory"},
		{factory1142, "/dev/sda", "Internal", fmt.Sprintf("installation failed: installer image %q not found in containerd store: image %q: not found", factory1142, factory1142)},
	} {
		_, err := lifecycleInstall(ctxTimeout(t, 5*time.Second), c, nsSystem, tc.image, tc.disk)
		if st, _ := status.FromError(err); st.Code().String() != tc.code || st.Message() != tc.msg {
			t.Errorf("install %q on %q: %v, want %s: %s", tc.image, tc.disk, err, tc.code, tc.msg)
		}
	}

	if _, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142); err != nil {
		t.Fatalf("pull: %v", err)
	}

	in, err := lifecycleInstall(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142, "/dev/sda")
	if err != nil || in.exit == nil || *in.exit != 0 {
		t.Fatalf("install: %+v, %v", in, err)
	}

	// install mode runs no pre-flight check
	want := "^" + logLine("running Talos installer v1.14.2") + logLine("installation of v1.14.2 complete") + "$"
	if !regexp.MustCompile(want).MatchString(in.output()) {
		t.Errorf("installer output:\n%s\nwant %s", in.output(), want)
	}

	_, err = lifecycleInstall(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142, "/dev/sda")
	wantStatus(t, "second install", err, codes.AlreadyExists, "machine is already installed")

	if obs := m.Observe(); obs.NextVersion != "v1.14.2" || obs.InstallImage != factory1142 {
		t.Errorf("after the install: %+v, want v1.14.2 for the next boot", obs)
	}
}

// The installer of LifecycleService.Upgrade sets the Upgrade META tag as
// the legacy sequence's does (cmd/installer/pkg/install install.go
// handleMeta), so a new version whose boot fails is reverted (main.go
// handle, revert.go revertBootloadInternal).
func TestLifecycleUpgradeBootFailsFallsBack(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := startWith(t, sim.Options{
		RebootDelay:  300 * time.Millisecond,
		UpgradeDelay: 100 * time.Millisecond,
		Machines:     []sim.MachineSpec{{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"}},
	})
	m := f.Machine("w-1")
	m.SetFaults(sim.Faults{UpgradeBootFails: true})
	c := admin(t, m.Addr())

	if _, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142); err != nil {
		t.Fatalf("pull: %v", err)
	}

	if up, err := lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsSystem, factory1142); err != nil || up.exit == nil || *up.exit != 0 {
		t.Fatalf("lifecycle upgrade: %+v, %v", up, err)
	}

	if err := c.Reboot(ctxTimeout(t, time.Second)); err != nil {
		t.Fatalf("reboot: %v", err)
	}

	// a client each poll, so that no reconnect backoff skips the short
	// failing boot; down in between
	until(t, "the new version boots", func() (bool, error) {
		got, _ := tag(t, admin(t, m.Addr()))

		return got == "v1.14.2", nil
	})

	until(t, "back on v1.14.1", func() (bool, error) {
		got, _ := tag(t, admin(t, m.Addr()))

		return got == "v1.14.1", nil
	})

	// the reboot asked for, the revert's; the installer it was installed
	// from: 1.14's default, the Image Factory's
	if obs := m.Observe(); obs.InstallImage != talos.DefaultInstallImage("v1.14.1") || obs.Reboots != 2 {
		t.Errorf("after the fallback: %+v, want v1.14.1 from %s after two reboots", obs, talos.DefaultInstallImage("v1.14.1"))
	}
}

// A reference with a tag and a digest is pulled by its digest
// (reference.ParseDockerRef drops the tag): the sim's registry has the
// digest of its tag's installer and no other. An injected error code by
// service and method hits that service's method only.
func TestLifecycleDigestsAndFaults(t *testing.T) {
	t.Parallel()

	_, wk := baseConfigs(t)
	f := start(t, sim.MachineSpec{Name: "w-1", Config: wk, TalosVersion: "v1.14.1"})
	m := f.Machine("w-1")
	c := admin(t, m.Addr())

	p, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsCRI, ghcr1139)
	if err != nil {
		t.Fatalf("pull: %v", err)
	}

	_, digest, _ := strings.Cut(p.name, "@")

	// pinned already: the name is the reference as normalized
	if again, err := pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, ghcr1139+"@"+digest); err != nil || again.name != p.name {
		t.Errorf("pull by tag and digest: %+v, %v; want %s", again, err, p.name)
	}

	wrong := talos.GHCRInstaller + "@sha256:" + strings.Repeat("0", 64)

	_, err = pullImage(ctxTimeout(t, 5*time.Second), c, nsSystem, ghcr1139+"@sha256:"+strings.Repeat("0", 64))
	wantStatus(t, "pull by another digest", err, codes.NotFound,
		fmt.Sprintf("error pulling image: failed to pull image %q: failed to resolve reference %q: %s: not found", wrong, wrong, wrong))

	m.SetFaults(sim.Faults{ErrorCodes: map[string]codes.Code{"LifecycleService.Upgrade": codes.Unavailable}})

	_, err = lifecycleUpgrade(ctxTimeout(t, 5*time.Second), c, nsCRI, ghcr1139)
	if client.StatusCode(err) != codes.Unavailable {
		t.Errorf("lifecycle upgrade under the fault: %v, want Unavailable", err)
	}

	if _, err := upgrade(t, c, &machine.UpgradeRequest{Image: factory1142}); err != nil {
		t.Errorf("legacy upgrade under LifecycleService's fault: %v", err)
	}
}
