package sim

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configdiff"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/container"
	"github.com/siderolabs/talos/pkg/machinery/config/validation"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"devata.dev/devata/internal/talos"
)

// metalMode is the runtime mode configs are validated in: bare metal,
// installed once configured.
type metalMode struct{ requiresInstall bool }

func (metalMode) String() string          { return "metal" }
func (m metalMode) RequiresInstall() bool { return m.requiresInstall }
func (metalMode) InContainer() bool       { return false }

// ApplyConfiguration applies a config in one of Talos' modes. The config is
// loaded and validated before anything else, a dry run included.
func (a *machineAPI) ApplyConfiguration(ctx context.Context, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	t, s := target(ctx)

	if !s.configured() {
		return a.applyMaintenance(ctx, t, s, in)
	}

	// A pending try is kept by any apply but a try: up to 1.13 before the
	// request is even read, a dry run included (v1.11.0 and v1.13.9
	// v1alpha1_server.go ApplyConfiguration); from 1.14 only by a valid
	// apply that is not a dry run (v1.14.1, the same function:
	// ApplyConfigSuite/TestApplyTry holds it).
	minor, _ := talos.Minor(s.version)
	if in.Mode != machine.ApplyConfigurationRequest_TRY && minor < 14 {
		t.cancelTry()
	}

	cfg, warnings, err := loadApplied(ctx, t, in.GetData())
	if err != nil {
		return nil, err
	}

	mode, details, why, err := resolveMode(s.active, cfg, in.Mode, s.version)
	if err != nil {
		return nil, err
	}

	if in.DryRun {
		return dryRun(s.active, cfg, mode, details)
	}

	if in.Mode != machine.ApplyConfigurationRequest_TRY && minor >= 14 {
		t.cancelTry()
	}

	if t.rebootDuringApply(cfg) {
		return nil, interrupted(ctx, t)
	}

	if details, err = t.applyIn(cfg, mode, in, details); err != nil {
		return nil, err
	}

	a.fleet.log.Info("sim: config applied", "machine", t.name, "mode", strings.ToLower(mode.String()))

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        mode,
		Warnings:    warnings,
		ModeDetails: details + why,
	}}}, nil
}

// loadApplied loads and validates the config a configured node is given,
// and returns it with the validation warnings.
func loadApplied(ctx context.Context, t *Machine, data []byte) (config.Provider, []string, error) {
	version := t.snap().version

	cfg, err := loadConfig(data, version)
	if err != nil {
		return nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}

	if cfg.RawV1Alpha1() == nil {
		return nil, nil, status.Error(codes.InvalidArgument, "the applied machine configuration doesn't contain v1alpha1 config, did you mean to patch the machine config instead?")
	}

	// v1alpha1_server.go ApplyConfiguration: then Validate, and
	// RuntimeValidate against the node's resources.
	warnings, _, err := validateConfig(ctx, t, cfg, version, metalMode{})
	if err != nil {
		return nil, nil, status.Error(codes.InvalidArgument, err.Error())
	}

	return cfg, warnings, nil
}

// loadConfig loads a config as machined does, refusing a document kind
// the machine's Talos (version) lacks.
func loadConfig(data []byte, version string) (config.Provider, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err == nil {
		err = notRegistered(data, version)
	}

	if err != nil {
		return nil, err
	}

	return cfg, nil
}

// validateConfig is ApplyConfiguration's validation of a loaded config on
// a machine of version: Validate in mode, then RuntimeValidate against the
// node's resources (in a mode that installs, the install disk selector
// must match one of its Disk resources: blockhelpers.MatchDisks) and the
// Kubernetes images this Talos supports (kubernetesImages). It returns
// both steps' warnings; runtime says the error is RuntimeValidate's, for
// the maintenance service before 1.13, which words the two apart.
func validateConfig(ctx context.Context, t *Machine, cfg config.Provider, version string, mode metalMode) (warnings []string, runtime bool, err error) {
	warnings, err = cfg.Validate(mode, validation.WithLocal())
	if err != nil {
		return nil, false, err
	}

	warningsRuntime, err := cfg.RuntimeValidate(ctx, t.st, mode)
	if err == nil {
		err = kubernetesImages(cfg, version)
	}

	if err != nil {
		return nil, true, err
	}

	return slices.Concat(warnings, warningsRuntime), false, nil
}

// resolveMode is the mode the config is applied in on a machine of
// version, with the reply's mode details and, when AUTO fell back to a
// reboot, why: TRY and NO_REBOOT refuse a change that needs a reboot, AUTO
// picks NO_REBOOT for a live change and REBOOT for any other. From Talos
// 1.14 every change applies live (talos v1.14.1 v1alpha1_server.go
// ApplyConfiguration; v1alpha1_runtime.go has no CanApplyImmediate any
// more): AUTO is always NO_REBOOT, TRY and NO_REBOOT refuse nothing, and
// REBOOT on a configured machine is Unimplemented.
func resolveMode(current, cfg config.Provider, requested machine.ApplyConfigurationRequest_Mode, version string) (mode machine.ApplyConfigurationRequest_Mode, details, why string, err error) {
	mode = requested
	details = "Applied configuration with a reboot"

	if rel, ok := talos.ReleaseOf(version); ok && rel.LiveApply {
		switch mode { //nolint:exhaustive // the others are refused below by applyIn as Talos does
		case machine.ApplyConfigurationRequest_REBOOT: //nolint:staticcheck // deprecated in 1.14, refused by it
			return mode, "", "", status.Error(codes.Unimplemented, "the REBOOT mode is not supported, please use AUTO or NO_REBOOT modes instead")
		case machine.ApplyConfigurationRequest_AUTO, machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
			if mode == machine.ApplyConfigurationRequest_AUTO {
				mode = machine.ApplyConfigurationRequest_NO_REBOOT
			}

			return mode, "Applied configuration without a reboot", "", nil
		case machine.ApplyConfigurationRequest_STAGED:
			return mode, "Staged configuration to be applied after the next reboot", "", nil
		}
	}

	switch mode { //nolint:exhaustive // REBOOT keeps the defaults
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_NO_REBOOT:
		if err = canApplyImmediate(current, cfg); err != nil {
			return mode, "", "", status.Error(codes.InvalidArgument, err.Error())
		}

		details = "Applied configuration without a reboot"
	case machine.ApplyConfigurationRequest_STAGED:
		details = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_AUTO:
		if err = canApplyImmediate(current, cfg); err != nil {
			mode = machine.ApplyConfigurationRequest_REBOOT
			why = ": " + err.Error()
		} else {
			mode = machine.ApplyConfigurationRequest_NO_REBOOT
			details = "Applied configuration without a reboot"
		}
	}

	return mode, details, why, nil
}

// dryRun is machined's reply to a dry run: what the mode would have done,
// and the config diff.
func dryRun(current, cfg config.Provider, mode machine.ApplyConfigurationRequest_Mode, details string) (*machine.ApplyConfigurationResponse, error) {
	diff, err := configdiff.DiffConfigs(current, cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to generate diff: %w", err)
	}

	if diff == "" {
		diff = "No changes."
	}

	return &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{
		Mode:        mode,
		ModeDetails: fmt.Sprintf("Dry run summary:\n%s (skipped in dry-run).\n%s", details, "Config diff:\n\n"+diff),
	}}}, nil
}

// applyIn applies cfg in the resolved mode and returns the mode details,
// which in TRY mode also say when the config is reverted.
func (m *Machine) applyIn(cfg config.Provider, mode machine.ApplyConfigurationRequest_Mode, in *machine.ApplyConfigurationRequest, details string) (string, error) {
	switch mode { //nolint:exhaustive // AUTO was resolved by resolveMode
	case machine.ApplyConfigurationRequest_TRY:
		timeout := constants.ConfigTryTimeout
		if in.TryModeTimeout != nil {
			timeout = in.TryModeTimeout.AsDuration()
		}

		details += fmt.Sprintf("\nThe config is applied in 'try' mode and will be automatically reverted back in %s", timeout)

		m.try(cfg, timeout)
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		m.setConfig(cfg, true, true)
	case machine.ApplyConfigurationRequest_STAGED:
		m.setConfig(cfg, false, true)
	case machine.ApplyConfigurationRequest_REBOOT:
		m.setConfig(cfg, false, true)
		m.reboot(true)
	default:
		return "", fmt.Errorf("incorrect mode '%s' specified for the apply config call", in.Mode)
	}

	return details, nil
}

// applyMaintenance is the maintenance service's apply: install the config
// and reboot into it. From 1.13 it is machined's own (applyMaintenance113).
func (a *machineAPI) applyMaintenance(ctx context.Context, t *Machine, s snapshot, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	if lifecycleAPIs(s.version) {
		return a.applyMaintenance113(ctx, t, s, in)
	}

	switch in.Mode { //nolint:exhaustive // the rest are refused
	case machine.ApplyConfigurationRequest_TRY, machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_AUTO:
	default:
		return nil, status.Errorf(codes.Unimplemented, "apply configuration --mode='%s' is not supported in maintenance mode",
			strings.ReplaceAll(strings.ToLower(in.Mode.String()), "_", "-"))
	}

	cfg, err := loadConfig(in.GetData(), s.version)
	if err != nil {
		return nil, fmt.Errorf("failed to parse config: %w", err)
	}

	// maintenance/server.go ApplyConfiguration: Validate, then
	// RuntimeValidate in a mode that installs.
	warnings, runtime, err := validateConfig(ctx, t, cfg, s.version, metalMode{requiresInstall: true})
	if err != nil {
		if runtime {
			return nil, status.Errorf(codes.InvalidArgument, "runtime configuration validation failed: %s", err)
		}

		return nil, status.Errorf(codes.InvalidArgument, "configuration validation failed: %s", err)
	}

	reply := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Warnings: warnings}}}

	if in.DryRun {
		reply.Messages[0].ModeDetails = "Dry run summary:\nNode is running in maintenance mode and does not have a config yet."

		return reply, nil
	}

	if err := a.install(ctx, t, cfg); err != nil {
		return nil, err
	}

	return reply, nil
}

// applyMaintenance113 is machined's ApplyConfiguration on a Talos 1.13+
// machine whose config is not complete (v1.13.9 and v1.14.1
// v1alpha1_server.go ApplyConfiguration, inMaintenance): any caller
// authorized (os:reader included, authorizeMaintenance); the config's
// load, Validate and RuntimeValidate errors are InvalidArgument with
// their own text; REBOOT becomes NO_REBOOT and AUTO resolves to NO_REBOOT
// (CanApplyImmediate is not asked in maintenance); a dry run answers with
// the diff against no config. NO_REBOOT sets the config, and the boot
// sequence it completes installs (when not installed) and boots it, as
// the maintenance install does; STAGED only persists it, for the next
// boot. TRY is played as NO_REBOOT: Talos arms a rollback to no config.
func (a *machineAPI) applyMaintenance113(ctx context.Context, t *Machine, s snapshot, in *machine.ApplyConfigurationRequest) (*machine.ApplyConfigurationResponse, error) {
	cfg, err := loadConfig(in.GetData(), s.version)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	warnings, _, err := validateConfig(ctx, t, cfg, s.version, metalMode{requiresInstall: true})
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}

	mode, details := in.Mode, "Applied configuration without a reboot"

	switch mode { //nolint:exhaustive // the rest are refused below
	case machine.ApplyConfigurationRequest_REBOOT, machine.ApplyConfigurationRequest_AUTO:
		mode = machine.ApplyConfigurationRequest_NO_REBOOT
	case machine.ApplyConfigurationRequest_STAGED:
		details = "Staged configuration to be applied after the next reboot"
	case machine.ApplyConfigurationRequest_NO_REBOOT, machine.ApplyConfigurationRequest_TRY:
	default:
		return nil, fmt.Errorf("incorrect mode '%s' specified for the apply config call", in.Mode)
	}

	if in.DryRun {
		none, err := container.New() // no config yet
		if err != nil {
			return nil, err
		}

		reply, err := dryRun(none, cfg, mode, details)
		if err == nil {
			reply.Messages[0].Warnings = warnings
		}

		return reply, err
	}

	reply := &machine.ApplyConfigurationResponse{Messages: []*machine.ApplyConfiguration{{Mode: mode, Warnings: warnings, ModeDetails: details}}}

	if mode == machine.ApplyConfigurationRequest_STAGED {
		t.setConfig(cfg, false, true)

		return reply, nil
	}

	if err := a.install(ctx, t, cfg); err != nil {
		return nil, err
	}

	return reply, nil
}

// install is what a maintenance apply does once it has replied: install
// cfg and boot into it. A failed install reboots into maintenance mode,
// unless 1.14's UnattendedInstallController keeps the config and retries
// (keepAndRetry, unattended.go; false on any older Talos). Its error is
// the caller's when the node went down mid-call (RebootDuringApply).
func (a *machineAPI) install(ctx context.Context, t *Machine, cfg config.Provider) error {
	if t.rebootDuringApply(cfg) {
		return interrupted(ctx, t)
	}

	if err := t.installedFrom(cfg); err != nil {
		if t.keepAndRetry(cfg, err) {
			return nil
		}

		a.fleet.log.Info("sim: install failed, rebooting into maintenance mode", "machine", t.name, "error", err)
		t.reboot(true)

		return nil
	}

	t.setConfig(cfg, false, true)
	t.reboot(true)

	a.fleet.log.Info("sim: config installed from maintenance", "machine", t.name)

	return nil
}

// rebootDuringApply fires the RebootDuringApply fault: the config is
// persisted, then the node goes down before it can reply.
func (m *Machine) rebootDuringApply(cfg config.Provider) bool {
	m.mu.Lock()
	fire := m.faults.RebootDuringApply
	m.faults.RebootDuringApply = false

	if fire {
		m.persisted = cfg
	}
	m.mu.Unlock()

	if fire {
		m.fleet.log.Info("sim: rebooting in the middle of an apply", "machine", m.name)
		m.reboot(false)
	}

	return fire
}

// interrupted is what the caller sees when the node went down mid-call:
// its own connection drops, or apid's to the routed node does.
func interrupted(ctx context.Context, t *Machine) error {
	if callFrom(ctx).endpoint == t {
		waitGone(ctx)
	}

	return status.Error(codes.Unavailable, "error reading from server: EOF")
}

func (m *Machine) setConfig(cfg config.Provider, active, persisted bool) {
	m.mu.Lock()
	restarts := false
	if active {
		restarts = m.activateLocked(cfg)
	}

	if persisted {
		m.persisted = cfg
	}
	m.mu.Unlock()

	m.sync()
	if restarts {
		m.scheduleRestartSyncs()
	}
}

// try makes cfg active without persisting it, and brings back the config
// that was active before once the timeout passes, as machined does.
func (m *Machine) try(cfg config.Provider, timeout time.Duration) {
	m.mu.Lock()
	if m.tryTimer != nil {
		m.tryTimer.Stop()
	}

	previous := m.active
	restarts := m.activateLocked(cfg)
	gen := m.bootGen

	var timer *time.Timer

	timer = time.AfterFunc(timeout, func() {
		m.mu.Lock()
		if m.tryTimer != timer || gen != m.bootGen {
			m.mu.Unlock()

			return
		}

		m.tryTimer = nil
		back := m.activateLocked(previous)
		m.mu.Unlock()

		m.fleet.log.Info("sim: try mode config rolled back", "machine", m.name)
		m.sync()
		if back {
			m.scheduleRestartSyncs()
		}
	})
	m.tryTimer = timer
	m.mu.Unlock()

	m.sync()
	if restarts {
		m.scheduleRestartSyncs()
	}
}

// cancelTry keeps a tried config the way machined does when another apply
// arrives: the rollback timer is dropped, the active config stays.
func (m *Machine) cancelTry() {
	m.mu.Lock()
	defer m.mu.Unlock()

	if m.tryTimer != nil {
		m.tryTimer.Stop()
		m.tryTimer = nil
	}
}

// liveMachineFields are the v1alpha1 machine fields machined applies without
// a reboot (Runtime.CanApplyImmediate in Talos v1.11); every other machine
// field needs one. The whole cluster section and debug apply live too, and
// so do documents other than v1alpha1 (volumes, network documents, …).
var liveMachineFields = []string{
	"MachineCA", "MachineAcceptedCAs", "MachineTime", "MachineCertSANs", "MachineInstall",
	"MachineNetwork", "MachineSysfs", "MachineSysctls", "MachineLogging", "MachineControlPlane",
	"MachineKubelet", "MachineKernel", "MachineRegistries", "MachinePods", "MachineSeccompProfiles",
	"MachineNodeAnnotations", "MachineNodeLabels", "MachineNodeTaints",
}

var liveFeatureFields = []string{
	"KubernetesTalosAPIAccessConfig", "KubePrismSupport", "HostDNSSupport", "ImageCacheSupport",
	"FeatureNodeAddressSortAlgorithm",
}

// canApplyImmediate says whether cfg can replace current without a reboot:
// it can when the two differ only in live fields.
func canApplyImmediate(current, cfg config.Provider) error {
	cur := current.RawV1Alpha1()
	if cur == nil {
		return errors.New("current config is not v1alpha1")
	}

	next := cfg.RawV1Alpha1()
	if next == nil {
		return errors.New("new config is not v1alpha1")
	}

	next = next.DeepCopy()
	next.ConfigDebug = cur.ConfigDebug
	next.ClusterConfig = cur.ClusterConfig

	if next.MachineConfig != nil && cur.MachineConfig != nil {
		copyFields(next.MachineConfig, cur.MachineConfig, liveMachineFields)

		if next.MachineConfig.MachineFeatures != nil && cur.MachineConfig.MachineFeatures != nil {
			copyFields(next.MachineConfig.MachineFeatures, cur.MachineConfig.MachineFeatures, liveFeatureFields)
		}
	}

	if reflect.DeepEqual(cur, next) {
		return nil
	}

	diff, err := configdiff.DiffConfigs(container.NewV1Alpha1(cur), container.NewV1Alpha1(next))
	if err != nil {
		return fmt.Errorf("error calculating diff: %w", err)
	}

	return fmt.Errorf("this config change can't be applied in immediate mode\ndiff:\n%s", diff)
}

// copyFields sets the named fields of *dst to those of *src.
func copyFields[T any](dst, src *T, fields []string) {
	d, s := reflect.ValueOf(dst).Elem(), reflect.ValueOf(src).Elem()

	for _, name := range fields {
		f := d.FieldByName(name)
		if !f.IsValid() {
			panic("sim: v1alpha1 has no field " + name)
		}

		f.Set(s.FieldByName(name))
	}
}
