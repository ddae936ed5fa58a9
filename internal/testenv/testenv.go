// Package testenv runs a real Kubernetes API server with etcd for tests, through
// controller-runtime's envtest, from binaries it builds once with the go command
// into a cache directory. It owns that build and cache; it runs no kubelet,
// scheduler or controllers, so nothing reconciles what a test creates.
package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startTimeout bounds each component's start. envtest's 20 s default is
// tight for a cold start on a loaded two-core machine.
const startTimeout = 90 * time.Second

// Env is a running API server.
type Env struct {
	// Config authenticates as a member of system:masters.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file (mode 0600) holding the
	// same credentials, for code that loads one.
	Kubeconfig string

	plane *envtest.Environment
}

// User returns a client config that authenticates as a new user with the
// given name and groups and no other rights: bind roles to it to test what
// a least-privileged caller can do.
func (e *Env) User(name string, groups ...string) (*rest.Config, error) {
	u, err := e.plane.ControlPlane.AddUser(envtest.User{Name: name, Groups: groups}, rest.CopyConfig(e.Config))
	if err != nil {
		return nil, fmt.Errorf("add user %s: %w", name, err)
	}
	return u.Config(), nil
}

// Start starts etcd and kube-apiserver and stops them when the test ends.
// If the binaries are missing it builds them first, which takes minutes
// once per machine; run `go run ./internal/testenv/cmd/testbin` beforehand
// to keep that out of test timeouts.
func Start(t testing.TB) *Env {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with Options.
func StartWith(t testing.TB, opts Options) *Env {
	t.Helper()
	ctx := t.Context()

	dir, err := DefaultDir()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if !complete(dir) {
		t.Logf("testenv: test binaries missing in %s: building them (minutes, once per machine)", dir)
		if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
			if deadline, ok := d.Deadline(); ok && time.Until(deadline) < 30*time.Minute {
				t.Logf("testenv: the test times out in %s; if the build does not fit, run `go run ./internal/testenv/cmd/testbin` first or raise -timeout", time.Until(deadline).Round(time.Second))
			}
		}
	}
	if err := Install(ctx, dir, logWriter{t}); err != nil {
		t.Fatalf("testenv: %v", err)
	}

	env, stop, err := run(ctx, dir, opts)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("testenv: stop control plane: %v", err)
		}
	})
	t.Logf("testenv: kube-apiserver %s up at %s", KubernetesVersion, env.Config.Host)
	return env
}

// Run starts etcd and kube-apiserver outside a test (devata demo), building
// the binaries first if they are missing, with progress on the given writer.
// stop ends both and removes the kubeconfig.
func Run(ctx context.Context, progress io.Writer) (env *Env, stop func() error, err error) {
	return RunWith(ctx, progress, Options{})
}

// RunWith is Run with Options.
func RunWith(ctx context.Context, progress io.Writer, opts Options) (env *Env, stop func() error, err error) {
	dir, err := DefaultDir()
	if err != nil {
		return nil, nil, err
	}
	if err := Install(ctx, dir, progress); err != nil {
		return nil, nil, err
	}
	return run(ctx, dir, opts)
}

// run starts the control plane. envtest picks each component's port once
// and retries on it; on a machine where other processes open many loopback
// ports (a large simulated fleet), that port can be taken in between, so a
// start that failed on a taken port is tried again from scratch. envtest's
// start cannot be interrupted: a ctx that ended meanwhile stops what it
// started as soon as it returns.
func run(ctx context.Context, dir string, opts Options) (*Env, func() error, error) {
	var err error
	for range 3 {
		var env *Env
		var stop func() error
		env, stop, err = start(dir, opts)
		if err == nil && ctx.Err() != nil {
			_ = stop()
			return nil, nil, fmt.Errorf("start kube-apiserver %s: %w", KubernetesVersion, context.Cause(ctx))
		}
		if err == nil {
			return env, stop, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, nil, err
}

func start(dir string, opts Options) (*Env, func() error, error) {
	out := &tail{max: 16 << 10}
	env := &envtest.Environment{
		UseExistingCluster:       new(false),
		ControlPlaneStartTimeout: startTimeout,
		ControlPlaneStopTimeout:  30 * time.Second,
	}
	// Both start through launch links (lifetime_linux.go): they die with
	// this process, however it ends.
	paths, removeLinks, err := launchDir(filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd"))
	if err != nil {
		return nil, nil, err
	}
	// the links are read at exec only: gone once envtest's start returns
	defer removeLinks()
	env.ControlPlane.APIServer = &envtest.APIServer{Path: paths[0]}
	// The simulated kubelets all listen on loopback, each on its own port
	// (Node.status.daemonEndpoints); their hostnames do not resolve. pods/exec
	// and logs reach them by InternalIP; their serving certificates are
	// self-signed, which an API server without --kubelet-certificate-authority
	// accepts, as a default kubeadm cluster does.
	env.ControlPlane.APIServer.Configure().Set("kubelet-preferred-address-types", "InternalIP")
	if len(opts.ServiceSubnets) > 0 {
		env.ControlPlane.APIServer.Configure().Set("service-cluster-ip-range", strings.Join(opts.ServiceSubnets, ","))
	}
	for k, v := range opts.APIServerArgs {
		env.ControlPlane.APIServer.Configure().Set(k, v)
	}
	certDir := ""
	if opts.ClusterCA != nil {
		if certDir, err = useClusterCA(env.ControlPlane.APIServer, opts); err != nil {
			return nil, nil, err
		}
	}
	removeCerts := func() {
		if certDir != "" {
			os.RemoveAll(certDir)
		}
	}
	env.ControlPlane.Etcd = &envtest.Etcd{Path: paths[1]}
	// envtest attaches the output to stdout when asked through its own
	// variable; otherwise keep the end of it for a failed start.
	if os.Getenv("KUBEBUILDER_ATTACH_CONTROL_PLANE_OUTPUT") != "true" {
		env.ControlPlane.APIServer.Out, env.ControlPlane.APIServer.Err = out, out
		env.ControlPlane.Etcd.Out, env.ControlPlane.Etcd.Err = out, out
	}
	cfg, err := env.Start()
	if err != nil {
		// A half-started control plane still has processes and temp dirs.
		_ = env.Stop()
		removeCerts()
		return nil, nil, fmt.Errorf("start kube-apiserver %s: %w\n--- control plane output (end) ---\n%s", KubernetesVersion, err, out.String())
	}
	kdir, err := os.MkdirTemp("", "devata-testenv-")
	if err != nil {
		_ = env.Stop()
		removeCerts()
		return nil, nil, err
	}
	kubeconfig := filepath.Join(kdir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, env.KubeConfig, 0o600); err != nil {
		_ = env.Stop()
		os.RemoveAll(kdir)
		removeCerts()
		return nil, nil, fmt.Errorf("write kubeconfig: %w", err)
	}
	stop := func() error {
		defer os.RemoveAll(kdir)
		defer removeCerts()
		return env.Stop()
	}
	return &Env{Config: cfg, Kubeconfig: kubeconfig, plane: env}, stop, nil
}

// logWriter turns build progress into test log lines.
type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(string(bytes.TrimRight(p, "\n")))
	return len(p), nil
}

// tail keeps the last max bytes written to it; the processes write from
// their own goroutines.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tail) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tail) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
