// Package talosapi is devata's Talos API client: dialing a machine (mTLS,
// or insecure in maintenance mode), observing the resources the checks need,
// the survey a planner decides from (observe, diff, dry run), apply, upgrade,
// the etcd snapshot stream and a bounded fan-out over the fleet. It holds no
// check (machines and the other families do), renders no config
// (bootstrap), decides no gate (gate) and formats no report (drift).
package talosapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/constants"
	"github.com/siderolabs/talos/pkg/machinery/role"
	"google.golang.org/grpc"

	"devata.dev/devata/inventory"
)

// Dialer opens Talos API clients to the machines of an inventory. It parses the
// talosconfig once and shares one TLS configuration across every machine.
//
// A machine is dialed directly (the node is the endpoint: the fast path) or
// through the talosconfig context's endpoints, which proxy the call to it
// by `node` metadata as talosctl -e E -n NODE does (apid's routing). Through
// the endpoints go every machine when endpoints are given explicitly
// (WithEndpoints, talosctl's -e) or the context has no client certificate
// (a talosconfig whose auth machinery's client handles, such as Omni's);
// otherwise a machine whose direct address refuses a connection, when the
// context has endpoints to try. Endpoints must be control planes for that:
// a worker's apid has no client certificate to forward with and refuses a
// call for any machine but itself with PermissionDenied "no request
// forwarding" (Talos' apid director.go), an error devata passes on as
// talosctl does.
type Dialer struct {
	tls       *tls.Config // nil: the context has no client certificate
	overrides map[string]string
	cfg       *clientconfig.Config
	context   string   // the talosconfig context used
	chosen    bool     // the context was chosen (talosctl --context), not the current one
	endpoints []string // where proxied calls enter
	explicit  bool     // endpoints were given (talosctl -e): every machine goes through them
	probe     func(ctx context.Context, addr string) error
	reload    string // WithReload's path, "" for none

	mu    sync.Mutex
	route map[string]routeSeen // machine name → the last route decided
}

// routeSeen is a decided route and when: a direct address that refused is
// tried again after routeTTL, so a machine that comes back is dialed directly.
type routeSeen struct {
	proxied bool
	at      time.Time
}

const routeTTL = 30 * time.Second

// DialOption changes how a Dialer picks a context and reaches machines.
type DialOption func(*Dialer)

// WithContext uses the talosconfig context name instead of the current one
// (talosctl --context).
func WithContext(name string) DialOption {
	return func(d *Dialer) {
		if name != "" {
			d.context, d.chosen = name, true
		}
	}
}

// WithEndpoints sends every call through these endpoints instead of the
// context's, naming the machine by `node` metadata (talosctl -e).
func WithEndpoints(endpoints ...string) DialOption {
	return func(d *Dialer) {
		if len(endpoints) > 0 {
			d.endpoints, d.explicit = endpoints, true
		}
	}
}

// WithReload reads the client certificate again from the talosconfig at
// path whenever that file changes, before the next connection. A pod's
// talosconfig from Talos' kubernetesTalosAPIAccess (a Secret Talos writes
// for a talos.dev ServiceAccount) holds a certificate of 6 hours that Talos
// renews an hour before it expires and the kubelet swaps into the mounted
// volume: a long-running reconcile must take the new one. A file that no
// longer loads keeps the last certificate that did.
func WithReload(path string) DialOption {
	return func(d *Dialer) { d.reload = path }
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
	cfg, err := clientconfig.ReadFrom(io.LimitReader(f, maxTalosconfig))
	if err != nil {
		return nil, fmt.Errorf("talosconfig %s: %w", path, err)
	}
	return cfg, nil
}

// maxTalosconfig bounds the talosconfig read: a real one is a few KiB per context.
const maxTalosconfig = 4 << 20

// NewDialer builds a dialer from a talosconfig context: the current one
// unless WithContext names another. overrides maps machine names to the
// host:port to dial instead of the inventory's address (devata sim writes
// them); an overridden machine is always dialed there, unless WithEndpoints
// sends every machine through the endpoints.
func NewDialer(cfg *clientconfig.Config, overrides map[string]string, opts ...DialOption) (*Dialer, error) {
	d := &Dialer{cfg: cfg, overrides: overrides, context: cfg.Context, route: map[string]routeSeen{}, probe: probeTCP}
	for _, o := range opts {
		o(d)
	}
	ctx, ok := cfg.Contexts[d.context]
	if !ok || ctx == nil {
		return nil, fmt.Errorf("talosconfig has no context %q (it has %s): pass --context NAME or set one with talosctl config context", d.context, contextNames(cfg))
	}
	if !d.explicit {
		d.endpoints = ctx.Endpoints
	}
	if ctx.Crt == "" || ctx.Key == "" {
		if ctx.Auth.SideroV1 == nil && ctx.Auth.Basic == nil {
			return nil, fmt.Errorf("talosconfig context %q has no client certificate and no auth: devata needs mTLS (devata gen config writes a talosconfig that has it)", d.context)
		}
		if len(d.endpoints) == 0 {
			return nil, fmt.Errorf("talosconfig context %q has no client certificate and no endpoints to reach machines through: pass -e ENDPOINT", d.context)
		}
		d.explicit = true // only machinery's client speaks this auth: through the endpoints
		return d, nil
	}
	if ctx.CA == "" {
		return nil, fmt.Errorf("talosconfig context %q has no CA: devata verifies every machine (devata gen config writes a talosconfig that has it)", d.context)
	}
	ca, err := base64.StdEncoding.DecodeString(ctx.CA)
	if err != nil {
		return nil, fmt.Errorf("talosconfig context %q: decode CA: %w", d.context, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("talosconfig context %q: the CA is not a PEM certificate", d.context)
	}
	crt, err := client.CertificateFromConfigContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("talosconfig context %q: client certificate: %w", d.context, err)
	}
	d.tls = &tls.Config{
		RootCAs:      pool,
		Certificates: []tls.Certificate{*crt},
		MinVersion:   tls.VersionTLS12,
		// One session cache for the fleet: redials resume instead of a full handshake.
		ClientSessionCache: tls.NewLRUClientSessionCache(1024),
	}
	if d.reload != "" {
		r := &reloader{path: d.reload, context: d.context, crt: crt, cache: d.tls.ClientSessionCache}
		r.seen, _ = os.Stat(d.reload)
		d.tls.GetClientCertificate = r.certificate
		d.tls.ClientSessionCache = r
	}
	return d, nil
}

// reloader is WithReload's client certificate, and the session cache that
// forgets sessions of a replaced certificate (a resumed session would
// present the old one's identity).
type reloader struct {
	path, context string
	cache         tls.ClientSessionCache

	mu   sync.Mutex
	seen os.FileInfo
	crt  *tls.Certificate
	gen  int
}

func (r *reloader) certificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refresh()
	return r.crt, nil
}

// refresh loads the certificate again when the file changed since it was
// last read (the kubelet replaces a Secret volume's file by a symlink
// swap: a new file). Called with mu held.
func (r *reloader) refresh() {
	fi, err := os.Stat(r.path)
	if err != nil || (r.seen != nil && os.SameFile(fi, r.seen) && fi.ModTime().Equal(r.seen.ModTime()) && fi.Size() == r.seen.Size()) {
		return
	}
	r.seen = fi // a file that does not load is not read again until it changes
	cfg, err := LoadTalosconfig(r.path)
	if err != nil {
		return
	}
	ctx, ok := cfg.Contexts[r.context]
	if !ok || ctx == nil {
		return
	}
	crt, err := client.CertificateFromConfigContext(ctx)
	if err != nil {
		return
	}
	r.crt = crt
	r.gen++
}

// Get looks for a session of the current certificate only: it checks the
// file first, because a resumed handshake asks for no certificate.
func (r *reloader) Get(k string) (*tls.ClientSessionState, bool) {
	r.mu.Lock()
	r.refresh()
	k = strconv.Itoa(r.gen) + "/" + k
	r.mu.Unlock()
	return r.cache.Get(k)
}

func (r *reloader) Put(k string, cs *tls.ClientSessionState) {
	r.mu.Lock()
	k = strconv.Itoa(r.gen) + "/" + k
	r.mu.Unlock()
	r.cache.Put(k, cs)
}

func contextNames(cfg *clientconfig.Config) string {
	names := make([]string, 0, len(cfg.Contexts))
	for name := range cfg.Contexts {
		names = append(names, strconv.Quote(name))
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// Roles are the Talos roles of the talosconfig's client certificate, read
// from its Organization as Talos' authorizer reads them
// (pkg/grpc/middleware/authz); known is false when the context has no
// client certificate (machinery's auth, such as Omni's, decides there).
func (d *Dialer) Roles() (roles role.Set, known bool) {
	if d.tls == nil || len(d.tls.Certificates) == 0 {
		return role.Set{}, false
	}
	crt := d.tls.Certificates[0]
	leaf := crt.Leaf
	if leaf == nil && len(crt.Certificate) > 0 {
		var err error
		if leaf, err = x509.ParseCertificate(crt.Certificate[0]); err != nil {
			return role.Set{}, false
		}
	}
	if leaf == nil {
		return role.Set{}, false
	}
	roles, _ = role.Parse(leaf.Subject.Organization)
	return roles, true
}

// ClientCertificate is the client certificate the talosconfig context
// presents now (the file's current one under WithReload) and the context's
// name; nil without a client certificate (machinery's auth, such as Omni's).
func (d *Dialer) ClientCertificate() (*x509.Certificate, string, error) {
	if d.tls == nil {
		return nil, d.context, nil
	}
	var crt *tls.Certificate
	switch {
	case d.tls.GetClientCertificate != nil:
		var err error
		if crt, err = d.tls.GetClientCertificate(nil); err != nil {
			return nil, d.context, err
		}
	case len(d.tls.Certificates) > 0:
		crt = &d.tls.Certificates[0]
	}
	if crt == nil || len(crt.Certificate) == 0 {
		return nil, d.context, nil
	}
	if crt.Leaf != nil {
		return crt.Leaf, d.context, nil
	}
	leaf, err := x509.ParseCertificate(crt.Certificate[0])
	if err != nil {
		return nil, d.context, fmt.Errorf("talosconfig context %q: client certificate: %w", d.context, err)
	}
	return leaf, d.context, nil
}

// Context is the talosconfig context the dialer uses, and whether it was
// chosen (--context) rather than the file's current one.
func (d *Dialer) Context() (string, bool) { return d.context, d.chosen }

// readers are the roles Talos lets read the machine's state (Version,
// ServiceList, COSI reads: services/machined.go rules); os:etcd:backup is
// not one of them.
var readers = role.MakeSet(role.Admin, role.Operator, role.Reader)

// mayRead says whether the talosconfig's role may read more than etcd:
// true for os:reader and up, and when the roles are not known (a call is
// then tried, and its refusal taken as an answer).
func (d *Dialer) mayRead() bool {
	roles, known := d.Roles()
	return !known || roles.IncludesAny(readers)
}

// RolesString names the certificate's roles for a message: "os:reader",
// "os:admin, os:etcd:backup", "none", or "unknown" without a certificate.
func (d *Dialer) RolesString() string {
	roles, known := d.Roles()
	switch s := roles.Strings(); {
	case !known:
		return "unknown (the talosconfig has no client certificate)"
	case len(s) == 0:
		return "none"
	default:
		return strings.Join(s, ", ")
	}
}

// Endpoint is where a machine's Talos API is dialed directly: its override,
// or its inventory address and port.
func (d *Dialer) Endpoint(m *inventory.Machine) string {
	if ep, ok := d.overrides[m.Name]; ok {
		return ep
	}
	return m.Endpoint()
}

// Override is the dial settings' address for a machine name, if they have
// one (the sim's loopback addresses; a machine no inventory lists).
func (d *Dialer) Override(name string) (string, bool) {
	ep, ok := d.overrides[name]
	return ep, ok
}

// Node is how a proxied call names the machine: its override (the sim
// routes host:port) or its inventory address, as talosctl -n takes it.
func (d *Dialer) Node(m *inventory.Machine) string {
	if ep, ok := d.overrides[m.Name]; ok {
		return ep
	}
	return m.Address
}

// Client returns an mTLS client for the machine: direct, or through the
// endpoints with the machine as `node` (see Dialer). Connecting is lazy:
// errors show on the first call.
func (d *Dialer) Client(ctx context.Context, m *inventory.Machine) (*client.Client, error) {
	if !d.proxied(ctx, m) {
		return client.New(ctx, client.WithTLSConfig(d.tls), client.WithEndpoints(d.Endpoint(m)))
	}
	node := d.Node(m)
	opts := []client.OptionFunc{
		client.WithEndpoints(d.endpoints...),
		client.WithGRPCDialOptions(
			grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				return invoker(client.WithNode(ctx, node), method, req, reply, cc, opts...)
			}),
			grpc.WithChainStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
				return streamer(client.WithNode(ctx, node), desc, cc, method, opts...)
			})),
	}
	if d.tls != nil {
		opts = append(opts, client.WithTLSConfig(d.tls))
	} else {
		// machinery's client builds the credentials and auth of the context
		opts = append(opts, client.WithConfig(d.cfg), client.WithContextName(d.context))
	}
	return client.New(ctx, opts...)
}

// Proxied says whether the machine's calls go through the endpoints, as
// Client last decided or would decide now.
func (d *Dialer) Proxied(ctx context.Context, m *inventory.Machine) bool {
	return d.proxied(ctx, m)
}

func (d *Dialer) proxied(ctx context.Context, m *inventory.Machine) bool {
	switch {
	case d.explicit:
		return true
	case len(d.endpoints) == 0:
		return false
	}
	if _, ok := d.overrides[m.Name]; ok {
		return false
	}
	ep := d.Endpoint(m)
	if slices.Contains(d.endpoints, ep) || slices.Contains(d.endpoints, m.Address) {
		return false // an endpoint itself: going through it is the direct dial
	}
	d.mu.Lock()
	seen, ok := d.route[m.Name]
	d.mu.Unlock()
	if ok && time.Since(seen.at) < routeTTL {
		return seen.proxied
	}
	proxied := d.probe(ctx, ep) != nil
	d.mu.Lock()
	d.route[m.Name] = routeSeen{proxied: proxied, at: time.Now()}
	d.mu.Unlock()
	return proxied
}

// probeTimeout bounds the direct-reachability probe: a LAN answers in
// milliseconds, a firewall that drops takes the whole timeout.
const probeTimeout = 2 * time.Second

func probeTCP(ctx context.Context, addr string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	return c.Close()
}

// Talosctl is the talosctl command line that reaches the machine the way
// devata did, for next steps: the context when one was chosen, the
// endpoints when given, and the node (without apid's default port).
func (d *Dialer) Talosctl(m *inventory.Machine) string {
	parts := []string{"talosctl"}
	if d.chosen {
		parts = append(parts, "--context", d.context)
	}
	if d.explicit && len(d.endpoints) > 0 && d.tls != nil {
		parts = append(parts, "-e", strings.Join(d.endpoints, ","))
	}
	node := d.Node(m)
	if host, port, err := net.SplitHostPort(node); err == nil && port == strconv.Itoa(constants.ApidPort) {
		node = host
	}
	return strings.Join(append(parts, "-n", node), " ")
}

// MaintenanceClient returns a client for a machine in maintenance mode: TLS
// without verification and without a client certificate, as talosctl
// --insecure. It is always direct: apid cannot proxy to a machine that has
// no identity yet.
func (d *Dialer) MaintenanceClient(ctx context.Context, m *inventory.Machine) (*client.Client, error) {
	return client.New(ctx, client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(d.Endpoint(m))) //nolint:gosec // maintenance mode has no identity to verify
}
