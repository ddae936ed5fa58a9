package talosapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/blang/semver/v4"
	"github.com/dustin/go-humanize"
	"github.com/siderolabs/talos/pkg/machinery/api/common"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
)

// The two ways Talos upgrades a machine. Talos 1.13 added the streaming
// LifecycleService.Upgrade (api/machine/lifecycle.proto), which runs the
// installer from an image pulled first (ImageService.Pull) and neither
// reboots nor drains: the caller reboots (MachineService.Reboot). It
// deprecated MachineService.Upgrade, which pulls, checks etcd, installs
// and reboots in one call; Talos 1.18 removes it. talosctl v1.13 and v1.14
// (cmd/talosctl/cmd/talos/upgrade.go upgradeViaLifecycleService) take the
// new way on machines newer than 1.13.0-alpha.2 and the old one on the
// others.
const (
	UpgradeViaLifecycle = "LifecycleService.Upgrade"
	UpgradeViaLegacy    = "MachineService.Upgrade"
)

// lifecycleVersions are the Talos versions that serve LifecycleService,
// as talosctl's talosUpgradeAPIVersionRange says.
var lifecycleVersions = semver.MustParseRange(">1.13.0-alpha.2 <2.0.0")

// UpgradeVia is the RPC that upgrades a machine running Talos version.
func UpgradeVia(version string) string {
	if v, err := semver.ParseTolerant(version); err == nil && lifecycleVersions(v) {
		return UpgradeViaLifecycle
	}
	return UpgradeViaLegacy
}

// systemContainerd is where the installer is pulled and run: containerd's
// system namespace, through the CRI driver (talosctl upgrade's default
// --namespace system, image.go containerdInstance).
var systemContainerd = &common.ContainerdInstance{Driver: common.ContainerDriver_CRI, Namespace: common.ContainerdNamespace_NS_SYSTEM}

// InstallerError is the installer's own failure: it ran and exited non-zero.
type InstallerError struct {
	ExitCode int32
	// Tail is the installer's last lines of output.
	Tail []string
}

func (e *InstallerError) Error() string {
	msg := fmt.Sprintf("the installer exited %d", e.ExitCode)
	if len(e.Tail) > 0 {
		msg += ": " + strings.Join(e.Tail, " | ")
	}
	return msg
}

// installerTail is how many of the installer's last lines an error keeps.
const installerTail = 8

// PullInstaller pulls image into the system containerd
// (ImageService.Pull, Talos 1.13 on), as talosctl upgrade does before it
// runs the installer. Talos pulls under ctx and stores nothing when ctx
// ends first. progress, when not nil, gets a line on the layers so far
// each time the stream reports (containerd's progress, every 100ms while
// layers download: progress/pull_progress.go). An image the store holds
// already is not pulled again, and then no progress comes.
func PullInstaller(ctx context.Context, c *client.Client, image string, progress func(line string)) error {
	pull, err := c.ImageClient.Pull(ctx, &machine.ImageServicePullRequest{Containerd: systemContainerd, ImageRef: image})
	if err != nil {
		return fmt.Errorf("pull the installer %s: %w", image, PlainError(err))
	}
	var layers pullLayers
	for {
		msg, err := pull.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("pull the installer %s: %w", image, PlainError(err))
		}
		if p := msg.GetPullProgress(); p != nil && progress != nil {
			progress(layers.saw(p))
		}
	}
}

// pullLayers sums up a pull's layers from its progress messages: Talos
// sends a layer's size only while it downloads, and its status after.
type pullLayers struct {
	ids   []string
	layer map[string]*pullLayer
}

type pullLayer struct {
	status        machine.ImageServicePullLayerProgress_Status
	offset, total int64
}

// saw records one message and returns the line for all layers, e.g.
// "52 MiB of 96 MiB downloaded, 0 of 2 layers extracted".
func (l *pullLayers) saw(p *machine.ImageServicePullProgress) string {
	if l.layer == nil {
		l.layer = map[string]*pullLayer{}
	}
	id, lp := p.GetLayerId(), p.GetProgress()
	ly := l.layer[id]
	if ly == nil {
		ly = &pullLayer{}
		l.layer[id] = ly
		l.ids = append(l.ids, id)
	}
	ly.status = lp.GetStatus()
	switch ly.status {
	case machine.ImageServicePullLayerProgress_DOWNLOADING:
		ly.offset, ly.total = lp.GetOffset(), max(ly.total, lp.GetTotal())
	default: // downloaded, extracting, extracted or already there
		ly.offset = ly.total
	}
	var offset, total int64
	extracted := 0
	for _, id := range l.ids {
		ly := l.layer[id]
		offset, total = offset+ly.offset, total+ly.total
		if ly.status == machine.ImageServicePullLayerProgress_EXTRACT_COMPLETE || ly.status == machine.ImageServicePullLayerProgress_ALREADY_EXISTS {
			extracted++
		}
	}
	return fmt.Sprintf("%s of %s downloaded, %d of %d layers extracted", humanize.IBytes(uint64(offset)), humanize.IBytes(uint64(total)), extracted, len(l.ids))
}

// LifecycleUpgrade upgrades a machine on Talos 1.13 or later the way
// talosctl does, once the installer is pulled (PullInstaller): it runs
// image as the installer (LifecycleService.Upgrade, whose output lines go
// to progress as they come), and, once it exited 0, reboots the machine
// into the new version (MachineService.Reboot). Talos checks nothing about
// etcd on this path: the caller's gate does. It returns what the
// installer printed.
func LifecycleUpgrade(ctx context.Context, c *client.Client, image string, progress func(line string)) ([]string, error) {
	stream, err := c.LifecycleClient.Upgrade(ctx, &machine.LifecycleServiceUpgradeRequest{
		Containerd: systemContainerd,
		Source:     &machine.InstallArtifactsSource{ImageName: image},
	})
	if err != nil {
		return nil, fmt.Errorf("run the installer %s: %w", image, PlainError(err))
	}
	var out []string
	exit := int32(-1)
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("run the installer %s: %w", image, PlainError(err))
		}
		switch p := msg.GetProgress().GetResponse().(type) {
		case *machine.LifecycleServiceInstallProgress_Message:
			for _, line := range strings.Split(strings.TrimRight(p.Message, "\n"), "\n") {
				if line = strings.TrimSpace(line); line != "" {
					out = append(out, line)
					if progress != nil {
						progress(line)
					}
				}
			}
		case *machine.LifecycleServiceInstallProgress_ExitCode:
			exit = p.ExitCode
		}
	}
	switch exit {
	case 0:
	case -1:
		return out, fmt.Errorf("run the installer %s: the stream ended without the installer's exit code; the machine was not rebooted: see %s", image, "talosctl dmesg")
	default:
		return out, &InstallerError{ExitCode: exit, Tail: out[max(0, len(out)-installerTail):]}
	}
	if err := c.Reboot(ctx); err != nil && !IsUnreachable(err) {
		return out, fmt.Errorf("reboot into the new version (the installer wrote it): %w", PlainError(err))
	}
	return out, nil
}
