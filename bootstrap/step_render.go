package bootstrap

import (
	"context"
	"fmt"

	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"devata.dev/devata/render"
	"devata.dev/devata/talosapi"
)

// render renders and validates every machine's config and makes the dialer,
// from the given talosconfig or one derived from the bundle.
func (s *Sequence) render(ctx context.Context) (string, error) {
	d, err := render.DesiredOf(ctx, s.inv, s.bundle, nil, false)
	if err != nil {
		return "", fmt.Errorf("rendering failed, nothing was sent to any machine: %w", err)
	}
	s.desired, s.desiredFor = d.Held(), d.For
	tc := s.opts.Talosconfig
	note := ""
	if tc == nil {
		r, err := render.NewRenderer(s.inv, s.bundle)
		if err != nil {
			return "", err
		}
		data, err := r.Talosconfig()
		if err != nil {
			return "", err
		}
		if tc, err = clientconfig.FromBytes(data); err != nil {
			return "", err
		}
		note = "; talosconfig derived from the bundle (os:admin)"
	} else if !sameCA(tc, s.bundle) {
		s.say("    warning: the talosconfig's CA is not the secrets bundle's OS CA: machines configured from this bundle will not accept it")
	}
	if s.dialer, err = talosapi.NewDialer(tc, s.opts.Overrides, s.opts.Dial...); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d configs rendered and validated%s", len(s.desired), note), nil
}

// talosconfigSource says which talosconfig the run dials with.
func (s *Sequence) talosconfigSource() string {
	tc := s.opts.Talosconfig
	if tc == nil {
		return "derived from " + rel(s.inv, s.secretsPath)
	}
	return "context " + tc.Context
}
