package sim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
)

// Upgrade as Talos v1.11.0 has it: the handler
// (internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go
// Upgrade) pulls the installer, checks etcd on a control plane
// (upgrade_etcd.go) and starts a sequence in the background; the
// sequences (internal/app/machined/pkg/runtime/v1alpha1/
// v1alpha1_sequencer.go Upgrade, StageUpgrade, Install) drain, stop
// services, run the installer into the other boot partition and reboot
// into it; machined's main.go reverts the bootloader when that boot fails.

// bootEntry is a boot partition: the Talos version it holds and the
// installer image that wrote it.
type bootEntry struct {
	version, image string
	// revert: the bootloader went back to it after a failed boot; it is
	// the version that booted before, so it boots.
	revert bool
	// install: a first install (LifecycleService.Install), not an
	// upgrade: the installer set no Upgrade META tag, nothing to revert to.
	install bool
}

// installImageOf is the installer image a config installs from
// (machine.install.image, else the default installer of the Talos that
// installs: images.DefaultInstallerImage, the ghcr.io installer, up to
// 1.13; images.InstallerImage("metal"), the Image Factory's, from 1.14:
// v1alpha1_sequencer_tasks.go Install in v1.14.1; internal/talos
// DefaultInstallImage). From 1.14 a config with an UnattendedInstallConfig
// document installs from its installer image instead, else from the boot
// entry's (controllers/runtime/unattended_install.go
// UnattendedInstallController.reconcile in v1.14.1): the sim's boot medium
// is the version's default installer.
func installImageOf(cfg config.Provider, version string) string {
	if cfg != nil && cfg.UnattendedInstallConfig() != nil {
		if img := cfg.UnattendedInstallConfig().InstallerImage(); img != "" {
			return img
		}

		return talos.DefaultInstallImage(version)
	}

	if cfg != nil && cfg.Machine() != nil && cfg.Machine().Install() != nil {
		if img := cfg.Machine().Install().Image(); img != "" {
			return img
		}
	}

	return talos.DefaultInstallImage(version)
}

// installedFrom is the boot sequence's Install task after a config came
// in maintenance mode (v1alpha1_sequencer_tasks.go Install): on a machine
// not installed, the config's installer image (machine.install.image, else
// the default installer) writes the boot partition, and the machine
// reboots into the installer's version, whatever the install medium ran;
// a machine whose disk still holds an install (STATE alone wiped) skips
// the install and keeps its version and installer.
//
// An installer the registry does not have fails the task: machined logs
// the error and reboots (machined main.go handle, after ten seconds) from
// the install medium, into maintenance mode again, without the config,
// which only the install's STATE would have kept. installedFrom then
// installs nothing and returns the pull's error. On 1.14 a config with an
// UnattendedInstallConfig document is installed by the
// UnattendedInstallController instead, which keeps the config and retries
// (unattended.go keepAndRetry, run by the apply on this error).
func (m *Machine) installedFrom(cfg config.Provider) error {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.installed {
		return nil
	}

	image := installImageOf(cfg, m.version)

	ref, err := parseDockerRef(image)
	if err != nil {
		return fmt.Errorf("failed to parse image reference %q: %w", image, err)
	}

	if _, err = m.fleet.pullable(image, ref, m.faults); err != nil {
		return err
	}

	m.installed = true
	m.installImage = image

	if v, ok := talosVersionTag(ref.tag); ok {
		m.version = v
	}

	return nil
}

// Upgrade answers as machined's Upgrade: refused in maintenance mode, a
// pull of the installer, etcd's checks on a control plane unless forced,
// then the ack while the sequence runs.
func (a *machineAPI) Upgrade(ctx context.Context, in *machine.UpgradeRequest) (*machine.UpgradeResponse, error) {
	t, s := target(ctx)

	if !s.configured() {
		// maintenance/server.go Upgrade: assertAdminRole comes first, and
		// only a SideroLink peer is os:admin there, which the sim's
		// maintenance callers never are
		return nil, status.Error(codes.Unimplemented, "API is not implemented in maintenance mode")
	}

	v113 := lifecycleAPIs(s.version)

	// Talos 1.13 and later (v1alpha1_server.go Upgrade, v1.13.9 and
	// v1.14.1): refused where the system disk holds no install, before
	// the pull
	if v113 && !t.isInstalled() {
		return nil, status.Error(codes.FailedPrecondition, "Talos is not installed")
	}

	a.fleet.log.Info("sim: upgrade request received", "machine", t.name, "image", in.GetImage(),
		"staged", in.GetStage(), "force", in.GetForce(), "reboot_mode", in.GetRebootMode().String())

	next, err := t.pullInstaller(ctx, in.GetImage(), s.faults)
	if err != nil {
		if ctx.Err() != nil {
			// the caller's deadline or cancel, in the pull (pull.go): a
			// plain error, which gRPC answers by what it wraps
			return nil, fmt.Errorf("error validating installer image %q: %w", in.GetImage(), err)
		}

		return nil, status.Errorf(codes.Unknown, "error validating installer image %q: %s", in.GetImage(), err)
	}

	// machine type != worker: init and controlplane alike; from Talos
	// 1.13 a preserve upgrade skips the checks too
	if s.controlPlane() && !in.GetForce() && (!v113 || !in.GetPreserve()) {
		unlock, err := a.fleet.checkEtcdForUpgrade(ctx, t, s)
		if unlock != nil {
			// the mutex guards only the checks: released once the call is done
			defer unlock()
		}

		if err != nil {
			return nil, err
		}
	}

	if !t.startUpgrade(next, in.GetStage()) {
		// controller.Run: an upgrade sequence runs already and nothing
		// takes one over (sequencer.go CanTakeOver); machined logs
		// "upgrade failed: locked" and the call is acked all the same
		a.fleet.log.Info("sim: upgrade sequence not started: another one runs", "machine", t.name)
	}

	return &machine.UpgradeResponse{Messages: []*machine.Upgrade{{
		Ack:     "Upgrade request received",
		ActorId: actorID(),
	}}}, nil
}

// pullInstaller is install.PullAndValidateInstallerImage under the
// caller's ctx: the reference must parse (image.Pull's
// reference.ParseDockerRef); an image the system containerd holds under
// that name is not pulled again (WithSkipIfAlreadyPulled); any other must
// be in the sim's registry (resolve), and its pull takes the machine's
// installer pull delay (pull.go), after which it is in the system
// containerd's system namespace. image.Pull retries a not-found once
// (WithMaxNotFoundRetries(1); Talos 1.14's PullWithRetriesAndTimeout five
// times, over two minutes) and go-retry returns its error set, which
// holds the one error. A ctx that ends during the pull stores nothing and
// returns go-retry's error for it (retriedPullError).
func (m *Machine) pullInstaller(ctx context.Context, image string, f Faults) (bootEntry, error) {
	ref, err := parseDockerRef(image)
	if err != nil {
		return bootEntry{}, fmt.Errorf("failed to parse image reference %q: %w", image, err)
	}

	if img, ok := m.pulled(legacyStore, ref.String()); ok {
		return img.installer(image), nil
	}

	img, err := m.fleet.pullable(image, ref, f)
	if err != nil {
		return bootEntry{}, fmt.Errorf("1 error(s) occurred:\n\t%w", err)
	}

	m.fleet.log.Info("sim: pulling the installer", "machine", m.name, "image", image, "takes", m.fleet.installerPullDelay(f))

	if err := download(ctx, m.fleet.installerPullDelay(f), nil); err != nil {
		m.fleet.log.Info("sim: installer pull cancelled by the caller; no upgrade", "machine", m.name, "image", image, "error", err)

		return bootEntry{}, retriedPullError(ref, err)
	}

	m.pull(legacyStore, ref, img)

	return img.installer(image), nil
}

// isInstalled: the system disk holds a Talos install
// (runtime.MachineState.Installed).
func (m *Machine) isInstalled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.installed
}

// talosVersionTag: a tag is a Talos version when it is v and a semantic
// version.
func talosVersionTag(tag string) (string, bool) {
	v, ok := strings.CutPrefix(tag, "v")
	if !ok {
		return "", false
	}

	if _, err := semver.Parse(v); err != nil {
		return "", false
	}

	return tag, true
}

// imageMissing: one of missing names the image as written, its repository,
// or the same reference.
func imageMissing(missing []string, image string, ref imageRef) bool {
	for _, m := range missing {
		if m == image {
			return true
		}

		mr, err := parseDockerRef(m)
		if err != nil || mr.repository != ref.repository {
			continue
		}

		if mr.tag == "" && mr.digest == "" || mr.String() == ref.String() {
			return true
		}
	}

	return false
}

// startUpgrade runs the upgrade sequence, or the staged one; it reports
// false when another upgrade sequence runs (the controller's lock). A
// staged upgrade writes its META tags first, so the next boot installs
// it even then (v1alpha1_state.go probeMeta).
func (m *Machine) startUpgrade(next bootEntry, staged bool) bool {
	m.mu.Lock()
	if staged {
		m.staged = &next
	}

	if m.upgrading {
		m.mu.Unlock()

		return false
	}

	m.upgrading = true
	gen := m.bootGen

	// the sequence drains first, unless the node never registered with
	// Kubernetes (CordonAndDrainNode is skipped with
	// kubelet.skipNodeRegistration)
	drain := m.fleet.upgradeDelay / 2
	if n := m.active.K8sNodeConfig(); m.active.Machine() != nil && n != nil && n.SkipNodeRegistration() {
		drain = 0
	}
	m.mu.Unlock()

	if staged {
		// StageUpgrade: stop pods and services, reboot; the install
		// sequence of the next boot runs the installer
		m.reboot(true)

		return true
	}

	m.sync()

	// Upgrade: cordon and drain, then StopServicesEphemeral (cri and what
	// depends on it, trustd), the installer into the other partition,
	// StopAllServices and the reboot
	time.AfterFunc(drain, func() { m.upgradeStep(gen, nil) })
	time.AfterFunc(m.fleet.upgradeDelay, func() { m.upgradeStep(gen, &next) })

	return true
}

// upgradeStep moves an upgrade sequence of boot gen on: without an entry
// it stops the ephemeral services; with one the installer has written it
// and the machine reboots into it.
func (m *Machine) upgradeStep(gen int, installed *bootEntry) {
	m.mu.Lock()
	if m.closed || gen != m.bootGen || !m.upgrading {
		m.mu.Unlock()

		return
	}

	if installed == nil {
		if m.stoppedAt.IsZero() {
			m.stoppedAt = time.Now()
		}
		m.mu.Unlock()

		m.sync()

		return
	}

	m.next = installed
	m.mu.Unlock()

	m.fleet.log.Info("sim: upgrade installed; rebooting", "machine", m.name, "version", installed.version)
	m.reboot(true)
}

// loadBootEntryLocked is what a boot does before it comes up. A staged
// upgrade runs its install sequence (v1alpha1_sequencer.go Install, with
// IsInstallStaged): the installer, then another reboot. A partition an
// installer wrote is loaded; the one it replaces is the fallback the
// Upgrade META tag names, and under UpgradeBootFails the new version's
// boot sequence fails. It reports how long until the next boot when
// this one does not come up.
func (m *Machine) loadBootEntryLocked() (time.Duration, bool) {
	if m.staged != nil {
		m.next, m.staged = m.staged, nil

		return m.fleet.upgradeDelay, true
	}

	if m.next == nil {
		return 0, false
	}

	next := *m.next
	m.next, m.fallback = nil, nil

	if !next.revert && !next.install {
		// the installer set the Upgrade tag; a revert deleted it
		m.fallback = &bootEntry{version: m.version, image: m.installImage, revert: true}
		m.bootFailing = m.faults.UpgradeBootFails
	}

	m.version, m.installImage = next.version, next.image

	return 0, false
}

// failBoot ends a failing boot as machined's main does when a sequence
// fails (main.go handle): revertBootloader points the bootloader back at
// the partition the Upgrade META tag names (revert.go
// revertBootloadInternal, grub Config.Revert), and the machine reboots
// into it (after ten seconds, which the sim folds into its reboot).
func (m *Machine) failBoot(gen int) {
	m.mu.Lock()
	if m.closed || gen != m.bootGen || !m.bootFailing {
		m.mu.Unlock()

		return
	}

	m.next, m.fallback = m.fallback, nil
	m.mu.Unlock()

	m.fleet.log.Info("sim: boot sequence failed; bootloader reverted", "machine", m.name)
	m.reboot(false)
}
