package talosapi

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"devata.dev/devata/inventory"
	"devata.dev/devata/redact"
	"github.com/siderolabs/talos/pkg/machinery/api/machine"
	"github.com/siderolabs/talos/pkg/machinery/client"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Mode is an apply mode as devata's CLI names it.
type Mode string

// Apply modes (devata apply --mode).
const (
	ModeAuto     Mode = "auto"
	ModeNoReboot Mode = "no-reboot"
	ModeReboot   Mode = "reboot"
	ModeStaged   Mode = "staged"
	ModeTry      Mode = "try"
)

// Modes lists every apply mode.
var Modes = []Mode{ModeAuto, ModeNoReboot, ModeReboot, ModeStaged, ModeTry}

// ParseMode parses a CLI mode name.
func ParseMode(s string) (Mode, error) {
	for _, m := range Modes {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown apply mode %q: use one of auto, no-reboot, reboot, staged, try", s)
}

// proto maps a mode to the API's enum. The enum's zero value is REBOOT, so
// every request sets it explicitly.
func (m Mode) proto() machine.ApplyConfigurationRequest_Mode {
	switch m {
	case ModeNoReboot:
		return machine.ApplyConfigurationRequest_NO_REBOOT
	case ModeReboot:
		return machine.ApplyConfigurationRequest_REBOOT
	case ModeStaged:
		return machine.ApplyConfigurationRequest_STAGED
	case ModeTry:
		return machine.ApplyConfigurationRequest_TRY
	default:
		return machine.ApplyConfigurationRequest_AUTO
	}
}

func fromProto(m machine.ApplyConfigurationRequest_Mode) Mode {
	switch m {
	case machine.ApplyConfigurationRequest_NO_REBOOT:
		return ModeNoReboot
	case machine.ApplyConfigurationRequest_REBOOT:
		return ModeReboot
	case machine.ApplyConfigurationRequest_STAGED:
		return ModeStaged
	case machine.ApplyConfigurationRequest_TRY:
		return ModeTry
	}
	return ModeAuto
}

// ApplyOutcome is what Talos said about an apply or a dry run. The server's own
// mode details carry an unredacted diff, so they are never kept; warnings
// and errors are scrubbed of the config's secrets.
type ApplyOutcome struct {
	// Mode is the mode Talos resolved: auto becomes no-reboot or reboot.
	Mode     Mode
	Warnings []string
}

// Reboots reports whether the apply takes the machine away.
func (o ApplyOutcome) Reboots() bool { return o.Mode == ModeReboot }

// DryRun asks the machine what applying config in mode would do, changing nothing.
func DryRun(ctx context.Context, c *client.Client, config []byte, mode Mode) (ApplyOutcome, error) {
	return apply(ctx, c, config, mode, true, 0)
}

// Apply sends config in mode. tryTimeout applies to mode try only.
func Apply(ctx context.Context, c *client.Client, config []byte, mode Mode, tryTimeout time.Duration) (ApplyOutcome, error) {
	return apply(ctx, c, config, mode, false, tryTimeout)
}

func apply(ctx context.Context, c *client.Client, config []byte, mode Mode, dryRun bool, tryTimeout time.Duration) (ApplyOutcome, error) {
	req := &machine.ApplyConfigurationRequest{Data: config, Mode: mode.proto(), DryRun: dryRun}
	if mode == ModeTry && tryTimeout > 0 {
		req.TryModeTimeout = durationpb.New(tryTimeout)
	}
	resp, err := c.ApplyConfiguration(ctx, req)
	if err != nil {
		return ApplyOutcome{}, PlainError(scrubError(err, redact.NewScrubber(config)))
	}
	out := ApplyOutcome{Mode: mode}
	var scrub *redact.Scrubber
	for _, msg := range resp.GetMessages() {
		out.Mode = fromProto(msg.GetMode())
		for _, w := range msg.GetWarnings() {
			if scrub == nil {
				scrub = redact.NewScrubber(config)
			}
			out.Warnings = append(out.Warnings, strings.TrimSpace(scrub.Scrub(w)))
		}
	}
	return out, nil
}

// scrubError returns err with its text scrubbed of config's secrets
// (Talos' errors about a config quote it: redact.Scrubber). The gRPC
// code stays, for client.StatusCode and IsUnreachable; the original error
// does not stay underneath, since its text is what must not be seen. An
// error that quoted nothing secret is returned as it is.
func scrubError(err error, s *redact.Scrubber) error {
	msg := err.Error()
	clean := s.Scrub(msg)
	if clean == msg {
		return err
	}
	st := client.Status(err)
	switch {
	case st == nil:
		return errors.New(clean)
	case st.Err().Error() == msg:
		// a plain status: scrub its message, so PlainError still shortens it
		return status.Error(st.Code(), s.Scrub(st.Message()))
	}
	return &scrubbedError{msg: clean, code: st.Code()}
}

// scrubbedError is a wrapped status error (a multi-node reply) after
// scrubbing: its text and its code, nothing of the original.
type scrubbedError struct {
	msg  string
	code codes.Code
}

func (e *scrubbedError) Error() string { return e.msg }

// GRPCStatus lets client.StatusCode see the original code.
func (e *scrubbedError) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }

// ErrConfigured is wrapped by ApplyMaintenance's refusal of a machine that
// answers on mTLS.
var ErrConfigured = errors.New("it is configured")

// ApplyMaintenance applies config to a machine in maintenance mode (mode
// auto, insecure). It first asks over mTLS and refuses, naming the machine
// and what it answered, when the machine is configured.
func ApplyMaintenance(ctx context.Context, d *Dialer, m *inventory.Machine, config []byte, timeout time.Duration) error {
	if answer := answersMTLS(ctx, d, m, timeout); answer != "" {
		return fmt.Errorf("%w: %s answers on mTLS (%s), so no insecure maintenance apply is sent to it; use devata apply for configured machines", ErrConfigured, m.Name, answer)
	}
	actx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.MaintenanceClient(actx, m)
	if err != nil {
		return fmt.Errorf("dial %s: %w", d.Endpoint(m), err)
	}
	defer c.Close()
	if _, err := Apply(actx, c, config, ModeAuto, 0); err != nil {
		return fmt.Errorf("maintenance apply: %w", err)
	}
	return nil
}

// answersMTLS returns what the machine said over mTLS, or "" when it did not
// answer there.
func answersMTLS(ctx context.Context, d *Dialer, m *inventory.Machine, timeout time.Duration) string {
	vctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, err := d.Client(vctx, m)
	if err != nil {
		return ""
	}
	defer c.Close()
	resp, err := c.Version(vctx)
	if err != nil {
		return ""
	}
	tag := "?"
	if msgs := resp.GetMessages(); len(msgs) > 0 {
		tag = msgs[0].GetVersion().GetTag()
	}
	return "Version answered: Talos " + tag
}
