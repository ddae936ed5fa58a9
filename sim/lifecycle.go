package sim

import (
	"fmt"
	"slices"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/compatibility"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
)

// lifecycleAPI is machine.LifecycleService of every machine of a fleet
// from Talos 1.13 (internal/app/lifecycle: lifecycle.go Service.Upgrade
// and Install, container.go runInstallerContainer, in v1.13.9 and
// v1.14.1); route.go answers for the machines below 1.13, which do not
// have it. It runs the installer of an image already pulled into the
// request's containerd store (images.go) and streams its output; it
// writes the other boot partition and changes nothing else: no drain, no
// etcd check, no reboot (the client asks MachineService.Reboot for that).
type lifecycleAPI struct {
	machine.UnimplementedLifecycleServiceServer

	fleet *Fleet
}

// Upgrade is Service.Upgrade, its checks in its order: the service's
// lock (FailedPrecondition "another installation/upgrade is already in
// progress"), an install on the system disk (FailedPrecondition "machine
// is not installed"), an image name (InvalidArgument "installer image
// name is required"), then runInstallerContainer, whose errors come back
// as Internal "upgrade failed: …": the containerd instance
// (ctrhelper), the image in its store by the exact name given
// (GetImage: "installer image %q not found in containerd store: image
// %q: not found"), then the installer in upgrade mode. The call ends OK
// whatever the installer's exit code, which is its last message.
func (a *lifecycleAPI) Upgrade(in *machine.LifecycleServiceUpgradeRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceUpgradeResponse]) error {
	t, s := target(srv.Context())

	unlock, ok := t.lockInstaller()
	if !ok {
		return status.Error(codes.FailedPrecondition, "another installation/upgrade is already in progress")
	}
	defer unlock()

	if !t.isInstalled() {
		return status.Error(codes.FailedPrecondition, "machine is not installed")
	}

	image := in.GetSource().GetImageName()
	if image == "" {
		return status.Error(codes.InvalidArgument, "installer image name is required")
	}

	a.fleet.log.Info("sim: lifecycle upgrade", "machine", t.name, "image", image)

	img, err := t.installerImage(s.version, in.GetContainerd(), image)
	if err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("upgrade failed: %v", err))
	}

	return t.runInstaller(s, img.installer(image), true, func(p *machine.LifecycleServiceInstallProgress) error {
		return srv.Send(&machine.LifecycleServiceUpgradeResponse{Progress: p})
	})
}

// Install is Service.Install's checks in its order: the lock, then
// AlreadyExists "machine is already installed" on an installed machine,
// an image name (InvalidArgument "installer image name is required"), a
// disk (InvalidArgument "destination disk is required"; one the node
// does not have: filepath.EvalSymlinks' error, InvalidArgument "invalid
// disk path: lstat <disk>: no such file or directory"), then the
// installer as Upgrade runs it (Internal "installation failed: …"), in
// install mode. A machine the sim serves over this API is always
// installed: its maintenance mode answers os:reader callers only, whom
// Install refuses.
func (a *lifecycleAPI) Install(in *machine.LifecycleServiceInstallRequest, srv grpc.ServerStreamingServer[machine.LifecycleServiceInstallResponse]) error {
	t, s := target(srv.Context())

	unlock, ok := t.lockInstaller()
	if !ok {
		return status.Error(codes.FailedPrecondition, "another installation/upgrade is already in progress")
	}
	defer unlock()

	if t.isInstalled() {
		return status.Error(codes.AlreadyExists, "machine is already installed")
	}

	image := in.GetSource().GetImageName()
	if image == "" {
		return status.Error(codes.InvalidArgument, "installer image name is required")
	}

	dev := in.GetDestination().GetDisk()
	if dev == "" {
		return status.Error(codes.InvalidArgument, "destination disk is required")
	}

	if !slices.ContainsFunc(disksOf(s), func(d disk) bool { return d.dev == dev }) {
		return status.Error(codes.InvalidArgument, fmt.Sprintf("invalid disk path: lstat %s: no such file or directory", dev))
	}

	a.fleet.log.Info("sim: lifecycle install", "machine", t.name, "image", image, "disk", dev)

	img, err := t.installerImage(s.version, in.GetContainerd(), image)
	if err != nil {
		return status.Error(codes.Internal, fmt.Sprintf("installation failed: %v", err))
	}

	entry := img.installer(image)
	entry.install = true

	return t.runInstaller(s, entry, false, func(p *machine.LifecycleServiceInstallProgress) error {
		return srv.Send(&machine.LifecycleServiceInstallResponse{Progress: p})
	})
}

// lockInstaller takes the service's lock (Service.lock TryLock); it is
// machined's, so a reboot frees it.
func (m *Machine) lockInstaller() (unlock func(), ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.installerLocked {
		return nil, false
	}

	m.installerLocked = true
	gen := m.bootGen

	return func() {
		m.mu.Lock()
		if m.bootGen == gen {
			m.installerLocked = false
		}
		m.mu.Unlock()
	}, true
}

// installerImage is runInstallerContainer up to the image: the containerd
// instance, then GetImage by the exact name (containerd's image store
// normalizes nothing: "ghcr.io/siderolabs/installer:v1.13.9" is found,
// "siderolabs/installer:v1.13.9" is not), whose not found the containerd
// client reads back from gRPC as `image "<name>": not found` (errgrpc
// ToNative).
func (m *Machine) installerImage(version string, in *common.ContainerdInstance, name string) (pulledImage, error) {
	st, err := storeOf(version, in)
	if err != nil {
		return pulledImage{}, err
	}

	img, ok := m.pulled(st, name)
	if !ok {
		return pulledImage{}, fmt.Errorf("installer image %q not found in containerd store: image %q: not found", name, name)
	}

	return img, nil
}

// runInstaller runs the installer of entry on the machine as
// runInstallerContainer does and streams its output: what the installer
// writes (cmd/installer: "running Talos installer <version>", in upgrade
// mode its pre-flight checks, "installation of <version> complete"; Go
// log lines, date and time first, one write each) as messages, then its
// exit code. Talos 1.14 sends a message per line (lifecycle/internal/
// output Stream, the newline kept); 1.13 what each read of the pipe
// returns, at most 512 bytes (container.go streamOutput), which for the
// installer's writes is one line each. The pre-flight check is the
// installer's (cmd/installer/pkg/install preflight.go: compatibility's
// UpgradeableFrom for the installer's version, from the version the
// machine reports); when it fails the installer prints the error
// (root.go Execute) and exits 4 (from Talos 1.14, pkg/installer/exitcode:
// ExitEnvironment) or 1 (1.13 and before), and writes nothing. Otherwise
// it runs for half the UpgradeDelay, and its partition is the one the
// next boot loads (upgrade.go loadBootEntryLocked; in upgrade mode the
// installer sets the Upgrade META tag, so a failing boot reverts). It
// runs to its end even when the client went away (task.Wait on a
// detached context); a reboot meanwhile kills it, and nothing is written.
func (m *Machine) runInstaller(s snapshot, entry bootEntry, upgrade bool, send func(*machine.LifecycleServiceInstallProgress) error) error {
	gen := m.bootGeneration()

	logf := func(msg string) string {
		return time.Now().UTC().Format("2006/01/02 15:04:05 ") + msg + "\n"
	}

	writes := []string{logf("running Talos installer " + entry.version)}
	exit := int32(0)

	if upgrade {
		writes = append(writes, logf("running pre-flight checks"), logf("host Talos version: "+s.version))

		if err := upgradeableFrom(entry.version, s.version); err != nil {
			exit = 1
			if minor, ok := talos.Minor(entry.version); !ok || minor >= 14 {
				exit = constants.ExitEnvironment
			}

			writes = append(writes, "pre-flight checks failed: "+err.Error()+"\n")
		} else {
			writes = append(writes, logf("all pre-flight checks successful"))
		}
	}

	// 1.13 reads the pipe 512 bytes at a time; 1.14 line by line
	size := 1 << 20
	if minor, _ := talos.Minor(s.version); minor == 13 {
		size = 512
	}

	var sendErr error

	out := func(writes ...string) {
		for _, w := range writes {
			for len(w) > 0 && sendErr == nil {
				n := min(len(w), size)
				sendErr = send(&machine.LifecycleServiceInstallProgress{
					Response: &machine.LifecycleServiceInstallProgress_Message{Message: w[:n]},
				})
				w = w[n:]
			}
		}
	}

	out(writes...)

	if exit == 0 {
		time.Sleep(m.fleet.upgradeDelay / 2)

		m.mu.Lock()
		done := !m.closed && m.bootGen == gen
		if done {
			m.next = &entry
			if entry.install {
				m.installed, m.installImage = true, entry.image
			}
		}
		m.mu.Unlock()

		if !done {
			return status.Error(codes.Unavailable, "sim: the machine went down while the installer ran")
		}

		m.fleet.log.Info("sim: installer wrote the next boot partition", "machine", m.name, "version", entry.version, "image", entry.image)

		out(logf("installation of " + entry.version + " complete"))
	}

	if sendErr != nil {
		return sendErr
	}

	return send(&machine.LifecycleServiceInstallProgress{
		Response: &machine.LifecycleServiceInstallProgress_ExitCode{ExitCode: exit},
	})
}

// upgradeableFrom is the installer's pre-flight check (preflight.go
// talosVersion): the host's version, then the installer's, parsed as
// compatibility does, and the installer's UpgradeableFrom the host's.
// machinery v1.14.1 holds the data of every release up to 1.14; a newer
// installer knows its own, which the sim does not: it passes.
func upgradeableFrom(installer, host string) error {
	if minor, ok := talos.Minor(installer); ok && minor > talos.NewestMinor {
		return nil
	}

	hv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: host})
	if err != nil {
		return fmt.Errorf("error parsing host Talos version: %w", err)
	}

	iv, err := compatibility.ParseTalosVersion(&machine.VersionInfo{Tag: installer})
	if err != nil {
		return fmt.Errorf("error parsing installer Talos version: %w", err)
	}

	return iv.UpgradeableFrom(hv)
}
