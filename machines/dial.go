// Package machines owns everything devata says over the Talos API: dialing a
// machine (mTLS, or insecure in maintenance mode), observing the resources the
// checks need, the survey a planner decides from (observe, diff, dry run),
// apply, and a bounded fan-out over the fleet; and the machine checks with
// FleetCheck, one drift pass. It does not render configs (bootstrap), decide
// gates (gate) or report formats (drift).
package machines

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"os"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"

	"devata.dev/devata/inventory"
)

// Dialer opens Talos API clients to the machines of an inventory. It parses the
// talosconfig once and shares one TLS configuration across every machine.
type Dialer struct {
	tls       *tls.Config
	overrides map[string]string
	source    string
}

// ErrNoTalosconfig is LoadTalosconfig's error when no path is given and no
// talosconfig is at talosctl's default paths.
var ErrNoTalosconfig = errors.New("no talosconfig: pass --talosconfig or set TALOSCONFIG (devata gen config writes one)")

// LoadTalosconfig reads a talosctl client config. An empty path means the
// default locations talosctl uses ($TALOSCONFIG is resolved by the caller).
func LoadTalosconfig(path string) (*clientconfig.Config, error) {
	if path == "" {
		paths, err := clientconfig.GetDefaultPaths()
		if err != nil {
			return nil, err
		}
		for _, p := range paths {
			if _, err := os.Stat(p.Path); err == nil {
				path = p.Path
				break
			}
		}
		if path == "" {
			return nil, ErrNoTalosconfig
		}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("talosconfig: %w (devata gen config writes one)", err)
	}
	defer f.Close()
	cfg, err := clientconfig.ReadFrom(f)
	if err != nil {
		return nil, fmt.Errorf("talosconfig %s: %w", path, err)
	}
	return cfg, nil
}

// NewDialer builds a dialer from the current context of a talosconfig.
// overrides maps machine names to the host:port to dial instead of the
// inventory's address (devata sim writes them).
func NewDialer(cfg *clientconfig.Config, overrides map[string]string) (*Dialer, error) {
	ctx, ok := cfg.Contexts[cfg.Context]
	if !ok || ctx == nil {
		return nil, fmt.Errorf("talosconfig has no context %q: set one with talosctl config context", cfg.Context)
	}
	if ctx.CA == "" || ctx.Crt == "" || ctx.Key == "" {
		return nil, fmt.Errorf("talosconfig context %q has no CA or client certificate: devata needs mTLS (devata gen config writes a talosconfig that has them)", cfg.Context)
	}
	ca, err := base64.StdEncoding.DecodeString(ctx.CA)
	if err != nil {
		return nil, fmt.Errorf("talosconfig context %q: decode CA: %w", cfg.Context, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("talosconfig context %q: the CA is not a PEM certificate", cfg.Context)
	}
	crt, err := client.CertificateFromConfigContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("talosconfig context %q: client certificate: %w", cfg.Context, err)
	}
	return &Dialer{
		tls: &tls.Config{
			RootCAs:      pool,
			Certificates: []tls.Certificate{*crt},
			MinVersion:   tls.VersionTLS12,
			// One session cache for the fleet: redials resume instead of a full handshake.
			ClientSessionCache: tls.NewLRUClientSessionCache(1024),
		},
		overrides: overrides,
		source:    cfg.Context,
	}, nil
}

// Endpoint is where a machine's Talos API is dialed: its override, or its
// inventory address and port.
func (d *Dialer) Endpoint(m *inventory.Machine) string {
	if ep, ok := d.overrides[m.Name]; ok {
		return ep
	}
	return m.Endpoint()
}

// Client returns an mTLS client talking to the machine directly (no apid
// proxying: the node is the endpoint). Connecting is lazy: errors show on the
// first call.
func (d *Dialer) Client(ctx context.Context, m *inventory.Machine) (*client.Client, error) {
	return client.New(ctx, client.WithTLSConfig(d.tls), client.WithEndpoints(d.Endpoint(m)))
}

// MaintenanceClient returns a client for a machine in maintenance mode: TLS
// without verification and without a client certificate, as talosctl --insecure.
func (d *Dialer) MaintenanceClient(ctx context.Context, m *inventory.Machine) (*client.Client, error) {
	return client.New(ctx, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(d.Endpoint(m))) //nolint:gosec // maintenance mode has no identity to verify
}
