package sim_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/siderolabs/crypto/x509"
	"github.com/siderolabs/talos/pkg/machinery/client"
	clientconfig "github.com/siderolabs/talos/pkg/machinery/client/config"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configpatcher"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"github.com/siderolabs/talos/pkg/machinery/config/generate"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"github.com/siderolabs/talos/pkg/machinery/config/machine"
	"github.com/siderolabs/talos/pkg/machinery/role"

	"devata.dev/devata/sim"
)

// bundle is generated once per test binary: its RSA key takes a second or two.
var bundle *secrets.Bundle

func TestMain(m *testing.M) {
	var err error

	bundle, err = secrets.NewBundle(secrets.NewFixedClock(time.Now()), config.TalosVersion1_11)
	if err != nil {
		fmt.Fprintln(os.Stderr, "generate secrets bundle:", err)
		os.Exit(1)
	}

	os.Exit(m.Run())
}

var (
	configsMu sync.Mutex
	configs   = map[string][2][]byte{}
)

// baseConfigs renders one control plane and one worker config from the
// bundle, for Kubernetes 1.34.1 (Talos 1.11's default).
func baseConfigs(t testing.TB) (controlPlane, worker []byte) {
	return baseConfigsFor(t, "1.34.1")
}

// oldFleetConfigs are configs a fleet on Talos v1.10.6 runs: Kubernetes
// 1.33, which Talos 1.10 and 1.11 both accept (a machine refuses images its
// own Talos does not support, compatibility talos110).
func oldFleetConfigs(t testing.TB) (controlPlane, worker []byte) {
	return baseConfigsFor(t, "1.33.4")
}

// baseConfigsFor renders one control plane and one worker config from the
// bundle for Kubernetes kube, once per version.
func baseConfigsFor(t testing.TB, kube string) (controlPlane, worker []byte) {
	t.Helper()

	configsMu.Lock()
	defer configsMu.Unlock()

	if c, ok := configs[kube]; ok {
		return c[0], c[1]
	}

	in, err := generate.NewInput("sim", "https://10.20.0.10:6443", kube,
		generate.WithSecretsBundle(bundle), generate.WithVersionContract(config.TalosVersion1_11), generate.WithInstallDisk("/dev/sda"))
	if err != nil {
		t.Fatalf("render configs: %v", err)
	}

	var out [2][]byte

	for i, typ := range []machine.Type{machine.TypeControlPlane, machine.TypeWorker} {
		cfg, err := in.Config(typ)
		if err != nil {
			t.Fatalf("render configs: %v", err)
		}

		if out[i], err = cfg.EncodeBytes(encoder.WithComments(encoder.CommentsDisabled)); err != nil {
			t.Fatalf("render configs: %v", err)
		}
	}

	configs[kube] = out

	return out[0], out[1]
}

// patch applies strategic-merge patches (YAML) to a config.
func patch(t *testing.T, cfg []byte, patches ...string) []byte {
	t.Helper()

	ps, err := configpatcher.LoadPatches(patches)
	if err != nil {
		t.Fatalf("load patches: %v", err)
	}

	out, err := configpatcher.Apply(configpatcher.WithBytes(cfg), ps)
	if err != nil {
		t.Fatalf("apply patches: %v", err)
	}

	b, err := out.Bytes()
	if err != nil {
		t.Fatalf("encode patched config: %v", err)
	}

	return b
}

// withDocs appends YAML documents to a config.
func withDocs(cfg []byte, docs ...string) []byte {
	out := strings.TrimRight(string(cfg), "\n")
	for _, d := range docs {
		out += "\n---\n" + strings.TrimSpace(d)
	}

	return []byte(out + "\n")
}

func start(t *testing.T, machines ...sim.MachineSpec) *sim.Fleet {
	t.Helper()

	return startWith(t, sim.Options{Machines: machines})
}

// startWith starts a fleet with opts, the test bundle and short delays
// where opts leaves them unset.
func startWith(t *testing.T, opts sim.Options) *sim.Fleet {
	t.Helper()

	opts.Bundle = bundle
	if opts.RebootDelay == 0 {
		opts.RebootDelay = 50 * time.Millisecond
	}

	if opts.EtcdJoinDelay == 0 {
		opts.EtcdJoinDelay = 50 * time.Millisecond
	}

	if opts.EtcdClientWait == 0 {
		opts.EtcdClientWait = 200 * time.Millisecond
	}

	if opts.RestartDelay == 0 {
		opts.RestartDelay = 200 * time.Millisecond
	}

	if opts.EtcdNoLeaderWait == 0 {
		opts.EtcdNoLeaderWait = 250 * time.Millisecond
	}

	f, err := sim.Start(t.Context(), opts)
	if err != nil {
		t.Fatalf("start fleet: %v", err)
	}

	t.Cleanup(func() { f.Close() }) //nolint:errcheck

	return f
}

var (
	certsMu sync.Mutex
	certs   = map[string]*x509.PEMEncodedCertificateAndKey{}
)

// talosconfig makes a talosconfig for the endpoints with a client
// certificate of the given roles, as talosctl would use.
func talosconfig(t *testing.T, roles role.Set, endpoints ...string) *clientconfig.Config {
	t.Helper()

	key := strings.Join(roles.Strings(), ",")

	certsMu.Lock()
	defer certsMu.Unlock()

	crt, ok := certs[key]
	if !ok {
		var err error

		crt, err = bundle.GenerateTalosAPIClientCertificate(roles)
		if err != nil {
			t.Fatalf("client certificate: %v", err)
		}

		certs[key] = crt
	}

	return clientconfig.NewConfig("sim", endpoints, bundle.Certs.OS.Crt, crt)
}

// dial connects over mTLS with a certificate of the given roles.
func dial(t *testing.T, roles role.Set, endpoints ...string) *client.Client {
	t.Helper()

	c, err := client.New(t.Context(), client.WithConfig(talosconfig(t, roles, endpoints...)))
	if err != nil {
		t.Fatalf("client: %v", err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c
}

func admin(t *testing.T, endpoints ...string) *client.Client {
	t.Helper()

	return dial(t, role.MakeSet(role.Admin), endpoints...)
}

// insecure connects the way `talosctl --insecure` does to a maintenance node.
func insecure(t *testing.T, endpoint string) *client.Client {
	t.Helper()

	c, err := client.New(t.Context(), client.WithTLSConfig(&tls.Config{InsecureSkipVerify: true}), client.WithEndpoints(endpoint)) //nolint:gosec // maintenance mode
	if err != nil {
		t.Fatalf("insecure client: %v", err)
	}

	t.Cleanup(func() { c.Close() }) //nolint:errcheck

	return c
}

// eventually retries f until it succeeds or the time is up.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()

	deadline := time.Now().Add(10 * time.Second)

	for {
		err := f()
		if err == nil {
			return
		}

		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing: %v", what, err)
		}

		time.Sleep(20 * time.Millisecond)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()

	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)

	return ctx
}

// bootTime is when the node last booted: its apid service's first event.
func bootTime(t *testing.T, c *client.Client) (time.Time, error) {
	t.Helper()

	svcs, err := c.ServiceInfo(ctxTimeout(t, time.Second), "apid")
	if err != nil {
		return time.Time{}, err
	}

	if len(svcs) != 1 || len(svcs[0].Service.Events.Events) == 0 {
		return time.Time{}, fmt.Errorf("apid service info: %v", svcs)
	}

	return svcs[0].Service.Events.Events[0].Ts.AsTime(), nil
}

var readerRoles = role.MakeSet(role.Reader)
