package reconcile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/client"

	"devata.dev/devata/internal/heartbeat"
	"devata.dev/devata/internal/talos"
	"devata.dev/devata/inventory"
	"devata.dev/devata/machines"
	"devata.dev/devata/plan"
	"devata.dev/devata/talosapi"
)

// Upgrades makes a Planner plan Talos OS upgrades to the inventory's
// cluster.talosVersion, booted from cluster.installImage.
type Upgrades struct {
	// Only plans upgrades and no config change: no dry run, no apply
	// (devata upgrade). Without it a machine whose config differs gets its
	// config first, and its upgrade on a later run.
	Only bool
	// Force allows what the version rule refuses: a downgrade, or a jump
	// of more than one minor release (UpgradePath).
	Force bool
	// Stage asks Talos to stage the upgrade and install it on the reboot
	// it starts at once (UpgradeRequest.stage: for files in use).
	Stage bool
	// DropExtensions allows an upgrade whose installer lacks system
	// extensions the machine runs, which it then no longer runs; without
	// it such an upgrade is refused, as is one whose extensions could not
	// be read.
	DropExtensions bool
}

// UpgradeStep is a planned Talos OS upgrade. Final, when set, is where a
// hop leads: To is the newest patch of the next minor release on the way
// there (nextHop), and a later step goes on from it.
type UpgradeStep struct {
	From, To, Image string
	Final           string
	Stage           bool
	// Schematic is the Image Factory schematic Image was built from ("" for
	// an installer from elsewhere), FromSchematic the one the machine
	// booted from; Drops the extensions it runs that Image lacks
	// (Upgrades.DropExtensions).
	Schematic, FromSchematic string
	Drops                    []string
	// want is what the installer puts on the machine: the wait after the
	// upgrade reads the booted image when it tells the step's end.
	want machines.WantBoot
	// Via is the RPC the rollout upgraded it through (talosapi.UpgradeVia),
	// and Installer the installer's last lines on LifecycleService; both
	// set by the rollout.
	Via       string
	Installer []string
}

// UpgradePath says whether Talos may go from one version to another
// without --force: never backwards (a downgrade is talosctl rollback's job,
// to the previous boot), and one minor release at a time, which is the path
// Talos' release notes support (v1.10 → v1.11, not v1.9 → v1.11).
func UpgradePath(from, to string) error {
	f, err := semver.ParseTolerant(from)
	if err != nil {
		return fmt.Errorf("the machine reports Talos %q, not a version devata can compare: upgrade it by hand (talosctl upgrade), or pass --force", from)
	}
	t, err := semver.ParseTolerant(to)
	if err != nil {
		return fmt.Errorf("cluster.talosVersion %q is not a version: fix the inventory", to)
	}
	switch {
	case t.LT(f):
		return fmt.Errorf("a downgrade from %s to %s: Talos goes back with talosctl rollback (to the previous boot); set cluster.talosVersion to %s, or pass --force to install the older version", from, to, from)
	case t.Major != f.Major || t.Minor > f.Minor+1:
		return fmt.Errorf("a jump from %s to %s: Talos upgrades one minor release at a time; set cluster.talosVersion to the latest v%d.%d patch and upgrade to %s after, or pass --force", from, to, f.Major, f.Minor+1, to)
	}
	return nil
}

// nextHop is the first step of an upgrade across more than one minor
// release, which Talos takes one minor at a time (each release's installer
// refuses a machine more than a minor or two back: its preflight's
// upgrade window): the newest patch of the next minor (talos.Releases
// Latest), from the installer repository of image (the same Image Factory
// schematic, or ghcr.io's). ok is false for a downgrade, or where no newer
// minor is known.
func nextHop(from, to, image string) (hop, hopImage string, ok bool) {
	f, err := semver.ParseTolerant(from)
	if err != nil {
		return "", "", false
	}
	t, err := semver.ParseTolerant(to)
	if err != nil || t.LT(f) || t.Major != f.Major || t.Minor <= f.Minor+1 {
		return "", "", false
	}
	next, ok := talos.ReleaseOf(fmt.Sprintf("v%d.%d.0", f.Major, f.Minor+1))
	if !ok {
		return "", "", false
	}
	i := strings.LastIndex(image, ":")
	if strings.Contains(image, "@") || i < 0 || strings.Contains(image[i:], "/") {
		return "", "", false // a digest, or no tag: it names the final version only
	}
	return next.Latest, image[:i] + ":" + next.Latest, true
}

// planUpgrade decides a machine's upgrade from the version it reports and
// the image it booted: a machine on cluster.talosVersion whose booted
// schematic is not its installer's is reinstalled at that version (how
// Talos adds or removes extensions). An upgrade that would remove
// extensions the machine runs, or whose machine's extensions could not be
// read, is refused unless Upgrades.DropExtensions.
func (p *Planner) planUpgrade(m *inventory.Machine, o *talosapi.Observation, evidence string) Action {
	want := p.Inventory.Cluster.TalosVersion
	boot := machines.WantBootOf(p.Inventory, m)
	image := boot.Image
	reinstall := false
	if o.Version == want {
		if o.Boot == nil || boot.Matches(o.Boot) {
			// unread extensions leave a machine on its version alone: the
			// extensions check reports what could not be read
			return Action{Machine: m, Kind: KindNone, Reason: "runs Talos " + want, Evidence: evidence}
		}
		reinstall = true
	}
	if tag := talosapi.ImageTag(image); tag != "" && tag != want {
		return Action{Machine: m, Kind: KindSkip, Evidence: evidence,
			Reason: fmt.Sprintf("upgrade refused: cluster.installImage %s is tagged %s, not cluster.talosVersion %s: set it to the installer of %s", image, tag, want, want)}
	}
	step := &UpgradeStep{From: o.Version, To: want, Image: image, Stage: p.Upgrades.Stage, Schematic: boot.SchematicID, want: boot}
	switch {
	case o.BootErr != nil && !p.Upgrades.DropExtensions:
		return Action{Machine: m, Kind: KindSkip, Evidence: evidence,
			Reason: "upgrade refused: its system extensions could not be read (" + o.BootErr.Error() + "), and an installer without them removes them: fix the read, or pass --drop-extensions to upgrade without knowing"}
	case o.Boot != nil:
		step.FromSchematic = o.Boot.SchematicID
		step.Drops = boot.Dropped(o.Boot)
		evidence += "; booted " + bootSummary(o.Boot)
	}
	if len(step.Drops) > 0 && !p.Upgrades.DropExtensions {
		return Action{Machine: m, Kind: KindSkip, Evidence: evidence,
			Reason: fmt.Sprintf("upgrade refused: it runs system extensions %s, which %s does not carry (the inventory's schematic lacks them), so the upgrade would remove them: add them to the schematic, or pass --drop-extensions", strings.Join(step.Drops, ", "), image)}
	}
	final := ""
	if err := UpgradePath(o.Version, want); err != nil && !p.Upgrades.Force {
		hop, hopImage, ok := nextHop(o.Version, want, image)
		if !ok {
			return Action{Machine: m, Kind: KindSkip, Reason: "upgrade refused: " + err.Error(), Evidence: evidence}
		}
		final, want = want, hop
		step.To, step.Image, step.Final = hop, hopImage, final
	}
	notReady := notReadyBefore(o)
	if notReady != "" {
		evidence += "; " + notReady
	}
	reason := fmt.Sprintf("runs Talos %s, the inventory says %s", o.Version, cmp.Or(final, want))
	if reinstall {
		reason = fmt.Sprintf("runs Talos %s booted from %s; the inventory's installer carries %s: a reinstall at the same version", o.Version, bootSummary(o.Boot), wantSummary(boot))
	}
	a := Action{
		Machine: m, Kind: KindUpgrade, Reboots: true,
		Reason: reason, Upgrade: step, Evidence: evidence, NotReady: notReady,
	}
	if len(step.Drops) > 0 {
		a.Warnings = append(a.Warnings, "it no longer runs system extensions "+strings.Join(step.Drops, ", ")+" after this upgrade (--drop-extensions)")
	}
	return a
}

// bootSummary is a booted image as plans print it.
func bootSummary(b *talosapi.BootImage) string {
	s := "schematic " + shortID(b.SchematicID)
	if b.SchematicID == "" {
		s = "an installer without a schematic"
	}
	if len(b.Extensions) == 0 {
		return s + " (no extensions)"
	}
	return s + " (extensions " + strings.Join(b.Extensions, ", ") + ")"
}

// wantSummary is an installer's contents as plans print them.
func wantSummary(w machines.WantBoot) string {
	s := "schematic " + shortID(w.SchematicID)
	switch {
	case w.SchematicID == "":
		s = "no schematic"
	case !w.Known:
		return s
	}
	if len(w.Extensions) == 0 {
		return s + " (no extensions)"
	}
	return s + " (extensions " + strings.Join(w.Extensions, ", ") + ")"
}

func shortID(id string) string { return id[:min(len(id), 8)] }

// upgrade upgrades one machine and waits until it runs the new version,
// running and ready: through LifecycleService on a machine that serves it
// (Talos 1.13 on: pull, run the installer, reboot), through
// MachineService.Upgrade on an older one or when a staged upgrade is asked
// for (the new call has no stage).
func (r *Rollout) upgrade(ctx context.Context, a Action) error {
	m, u := a.Machine, a.Upgrade
	start := time.Now()
	u.Via = talosapi.UpgradeVia(u.From)
	if u.Stage && u.Via == talosapi.UpgradeViaLifecycle {
		u.Via = talosapi.UpgradeViaLegacy // staging is the legacy call's alone
	}
	if u.From == u.To {
		plan.Say(r.say, m.Name, "reinstall Talos %s (%s) through %s, REBOOTS", u.To, u.Image, u.Via)
	} else {
		plan.Say(r.say, m.Name, "upgrade Talos %s → %s (%s) through %s, REBOOTS", u.From, u.To, u.Image, u.Via)
	}
	if a.NotReady != "" {
		r.say("    %s: %s; the wait after the upgrade needs it running and ready", m.Name, a.NotReady)
	}
	var err error
	if u.Via == talosapi.UpgradeViaLifecycle {
		err = r.lifecycleUpgrade(ctx, m, u)
	} else {
		err = r.legacyUpgrade(ctx, m, u)
	}
	if err != nil {
		return err
	}
	if err := r.waitUpgraded(ctx, m, u); err != nil {
		return err
	}
	r.say("    %s: runs Talos %s, stage running (%s)", m.Name, u.To, time.Since(start).Round(time.Millisecond))
	return nil
}

// DefaultPullTimeout bounds the call in which Talos pulls the installer
// when Rollout.PullTimeout (--pull-timeout) gives no other bound. Talos
// pulls it inside MachineService.Upgrade (install/pull.go
// PullAndValidateInstallerImage) and, from 1.13, inside ImageService.Pull,
// both under the caller's deadline, and cancels the pull when that
// passes, so the call's bound must cover a whole pull, which --timeout
// (one quick API call) does not. An installer is a few hundred MB at most
// (kernel, initramfs, installer, extensions): ten minutes is 600 MB at
// 1 MB/s, room for a slow link or a cold mirror; a pull slower than that
// is better stopped and reported than waited on. Talos bounds its own
// unattended pulls at 20 minutes (image.PullTimeout), retries included.
const DefaultPullTimeout = 10 * time.Minute

// pullTimeout is the bound of the call that pulls the installer.
func (r *Rollout) pullTimeout() time.Duration { return cmp.Or(r.PullTimeout, DefaultPullTimeout) }

// legacyUpgrade is MachineService.Upgrade: Talos pulls the installer and,
// on a control plane, checks etcd inside the call, under its deadline
// (--pull-timeout), then replies and installs and reboots after. A call
// that ran out of that deadline started nothing; a connection lost
// otherwise may have, and is judged by the version the machine comes
// back on.
func (r *Rollout) legacyUpgrade(ctx context.Context, m *inventory.Machine, u *UpgradeStep) error {
	actx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	c, err := r.Dialer.Client(actx, m)
	if err != nil {
		return fmt.Errorf("%s: upgrade to %s: %w", m.Name, u.To, err)
	}
	defer c.Close()
	bound := r.pullTimeout()
	pctx, pcancel := context.WithTimeout(ctx, bound)
	defer pcancel()
	beat := heartbeat.Start(r.Say, r.Heartbeat, bound, m.Name+" to pull "+u.Image+" and accept the upgrade (MachineService.Upgrade)")
	_, err = c.UpgradeWithOptions(pctx, client.WithUpgradeImage(u.Image), client.WithUpgradeStage(u.Stage))
	beat.Stop()
	switch {
	case err == nil:
		r.say("    %s: upgrade accepted; Talos installs %s and reboots: waiting for it to return", m.Name, u.To)
	case ctx.Err() != nil:
		return fmt.Errorf("%s: upgrade to %s: %w", m.Name, u.To, err)
	case ranOut(pctx):
		// Talos answers its own "timeout" when its reply beats the
		// client's deadline: the deadline tells, not the code
		if stage := r.upgradeStage(ctx, m); stage != "" {
			r.say("    %s: the upgrade call ran out of --pull-timeout %s, but the machine is in stage %s: Talos took the upgrade as the deadline passed; waiting for it to return", m.Name, bound, stage)
			return nil
		}
		r.say("    %s: upgrade not started: Talos did not answer the upgrade call within --pull-timeout %s", m.Name, bound)
		return r.notStarted(m, u, talosapi.UpgradeViaLegacy, bound, err)
	case talosapi.IsUnreachable(err):
		// Talos replies before it drains and reboots; a dropped call may
		// still have started the upgrade: judge by the version it comes back on.
		r.say("    %s: connection lost during the upgrade call (%v); waiting to see whether it upgrades", m.Name, err)
	default:
		return fmt.Errorf("%s: upgrade to %s: %w", m.Name, u.To, err)
	}
	return nil
}

// deadlineSlack is how close to its deadline a call that failed counts as
// having run out of it: the server holds the deadline too (sent as
// grpc-timeout, truncated), and its answer can come a hair before the
// caller's.
const deadlineSlack = 20 * time.Millisecond

// ranOut says whether a call under ctx that just failed ran out of ctx's
// deadline. It reads the clock, not ctx.Err() alone, nor the error's code:
// the error can arrive before ctx's own timer fires (gRPC itself reads
// the deadline by the clock, then), and Talos' reply can beat it with an
// error of its own (Unknown "… timeout": go-retry's).
func ranOut(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && time.Until(d) < deadlineSlack
}

// upgradeStage is the stage of a machine whose upgrade call ran out of
// its deadline when that stage says an upgrade runs after all (the reply
// lost the race with the deadline); "" otherwise, a failed look included:
// Talos drains before anything else, so a machine that took the upgrade
// still answers.
func (r *Rollout) upgradeStage(ctx context.Context, m *inventory.Machine) string {
	octx, cancel := context.WithTimeout(ctx, r.Timeout)
	defer cancel()
	switch o := talosapi.Observe(octx, r.Dialer, m); {
	case o.Err != nil:
		return ""
	case o.Stage == "upgrading" || o.Stage == "rebooting":
		return o.Stage
	}
	return ""
}

// notStarted is the error of an upgrade whose call that pulls the
// installer (through via) ran out of --pull-timeout: Talos cancelled the
// pull, nothing was installed, and what helps is a faster pull, a pull
// made beforehand (on Talos 1.13 and later, where devata's pull then
// finds the installer in the system containerd; MachineService.Upgrade
// pulls into the system containerd's own store, which no API reaches
// before 1.13 and which every boot empties) or a longer bound.
func (r *Rollout) notStarted(m *inventory.Machine, u *UpgradeStep, via string, bound time.Duration, err error) error {
	what := fmt.Sprintf("Talos did not answer the upgrade call within --pull-timeout %s: it pulls %s inside MachineService.Upgrade, then checks etcd on a control plane, and stops both at the call's deadline", bound, u.Image)
	help := "pull from a faster registry or a registry mirror near the machine (a RegistryMirrorConfig document from Talos 1.12, machine.registries.mirrors before), or give a longer --pull-timeout"
	if via == talosapi.UpgradeViaLifecycle {
		what = fmt.Sprintf("Talos did not finish pulling %s within --pull-timeout %s: ImageService.Pull stops at the call's deadline and keeps nothing", u.Image, bound)
		help = fmt.Sprintf("pull it beforehand (%s image pull --namespace system %s; devata's pull then finds it), pull from a faster registry or a registry mirror near the machine (a RegistryMirrorConfig document from Talos 1.12, machine.registries.mirrors before), or give a longer --pull-timeout", r.Dialer.Talosctl(m), u.Image)
	}
	return fmt.Errorf("%s: upgrade to %s not started: %s (the call ended: %v); %s still runs %s and nothing was installed: %s, then run devata upgrade again",
		m.Name, u.To, what, talosapi.PlainError(err), m.Name, u.From, help)
}

// lifecycleUpgrade is ImageService.Pull, then LifecycleService.Upgrade:
// the installer is pulled under --pull-timeout (Talos cancels the pull at
// its deadline: then the upgrade has not started), then run while the
// machine runs, its output the heartbeat of the wait, under --wait; then
// the machine is rebooted into the new version.
func (r *Rollout) lifecycleUpgrade(ctx context.Context, m *inventory.Machine, u *UpgradeStep) error {
	actx, acancel := context.WithTimeout(ctx, r.Timeout)
	defer acancel()
	c, err := r.Dialer.Client(actx, m)
	if err != nil {
		return fmt.Errorf("%s: upgrade to %s: %w", m.Name, u.To, err)
	}
	defer c.Close()
	bound := r.pullTimeout()
	pctx, pcancel := context.WithTimeout(ctx, bound)
	defer pcancel()
	beat := heartbeat.Start(r.Say, r.Heartbeat, bound, m.Name+" to pull "+u.Image+" (ImageService.Pull)")
	err = talosapi.PullInstaller(pctx, c, u.Image, beat.Saw)
	beat.Stop()
	switch {
	case err != nil && ctx.Err() == nil && ranOut(pctx):
		r.say("    %s: upgrade not started: the installer pull did not finish within --pull-timeout %s", m.Name, bound)
		return r.notStarted(m, u, talosapi.UpgradeViaLifecycle, bound, err)
	case err != nil:
		return fmt.Errorf("%s: upgrade to %s: %w; the machine still runs %s (nothing is installed until the installer exits 0)", m.Name, u.To, err, u.From)
	}
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	beat = heartbeat.Start(r.Say, r.Heartbeat, r.Wait, m.Name+"'s installer ("+u.Image+")")
	out, err := talosapi.LifecycleUpgrade(wctx, c, u.Image, func(line string) { beat.Saw("installer: " + printable(line)) })
	beat.Stop()
	u.Installer = out[max(0, len(out)-installerLines):]
	if err != nil {
		return fmt.Errorf("%s: upgrade to %s through %s: %w; the machine still runs %s (nothing is installed until the installer exits 0)", m.Name, u.To, talosapi.UpgradeViaLifecycle, err, u.From)
	}
	r.say("    %s: installer done (%d lines of output); rebooting into %s: waiting for it to return", m.Name, len(out), u.To)
	return nil
}

// installerLines is how much of the installer's output an upgrade keeps
// for its audit record.
const installerLines = 20

// printable is s with what a terminal would act on escaped: the
// installer's output comes from the machine.
func printable(s string) string {
	if q := strconv.Quote(s); q[1:len(q)-1] != s {
		return q
	}
	return s
}

// waitUpgraded polls until the machine reports u.To, running and ready (or
// ready but for its Node, as waitConverged accepts), booted from u's
// installer's schematic when that tells (a reinstall at the same version,
// or an installer whose schematic is known). A machine seen down that
// comes back running u.From (or, for a reinstall, its old schematic) did
// not take the new image (Talos boots the previous one when the new one
// fails): that fails at once.
func (r *Rollout) waitUpgraded(ctx context.Context, m *inventory.Machine, u *UpgradeStep) error {
	wctx, cancel := context.WithTimeout(ctx, r.Wait)
	defer cancel()
	var last string // what the last look found, once one did
	wentDown := false
	reinstall := u.From == u.To
	var reads []talosapi.Read
	if reinstall || u.want.Known {
		reads = append(reads, talosapi.ReadBootImage)
	}
	beat := heartbeat.Start(r.Say, r.Heartbeat, r.Wait, m.Name+" to come back on Talos "+u.To)
	defer beat.Stop()
	for {
		octx, ocancel := context.WithTimeout(ctx, r.Timeout)
		o := talosapi.Observe(octx, r.Dialer, m, reads...)
		ocancel()
		ready := o.Stage == "running" && o.Ready
		nodeWait := ""
		if o.Err == nil && o.Stage == "running" && o.NotReadyOnlyForNode() {
			// ready but for its Node: enough only while no CNI runs
			runs, why, _ := r.cniRuns(ctx) // an upgrade reboots: an unknown waits
			ready = !runs
			if runs {
				nodeWait = "; its Node is not Ready while a CNI runs in the cluster (" + why + "): waiting for the Node"
			}
		}
		booted := len(reads) == 0 || o.Boot != nil && u.want.Matches(o.Boot)
		switch {
		case o.Err != nil:
			wentDown, last = true, o.Err.Error()
		case o.Version == u.To && ready && booted:
			return nil
		case reinstall && wentDown && ready && o.Boot != nil:
			return fmt.Errorf("%s went down and came back on Talos %s booted from %s, not from %s: the reinstall did not take (Talos boots the previous image when the new one fails); see %s, then run devata upgrade again",
				m.Name, u.To, bootSummary(o.Boot), u.Image, r.Dialer.Talosctl(m)+" dmesg")
		case !reinstall && o.Version == u.From && wentDown && ready:
			return fmt.Errorf("%s went down and came back on Talos %s, not %s: the new version did not take (Talos boots the previous one when it fails); see %s, then run devata upgrade again",
				m.Name, u.From, u.To, r.Dialer.Talosctl(m)+" dmesg")
		default:
			last = fmt.Sprintf("Talos %s, stage %s, ready %t", o.Version, o.Stage, o.Ready)
			if len(o.Unmet) > 0 {
				last += "; unmet: " + strings.Join(o.Unmet, "; ")
			}
			last += nodeWait
			switch {
			case o.BootErr != nil:
				last += "; extensions unread: " + o.BootErr.Error()
			case o.Boot != nil && !booted:
				last += "; booted " + bootSummary(o.Boot)
			}
		}
		beat.Saw(last)
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s did not come back on Talos %s from %s within %s: %s", m.Name, u.To, u.Image, r.Wait, last)
		case <-time.After(r.Poll):
		}
	}
}
