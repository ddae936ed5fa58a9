package bootstrap

import (
	"context"
	"fmt"
	"os"

	"k8s.io/client-go/tools/clientcmd"

	"devata.dev/devata/render"
)

type kubeconfigState struct {
	Path   string
	Exists bool
	// Ours: the existing file is for this cluster (server and CA).
	Ours bool
	Why  string
}

// kubeconfigState reads the kubeconfig at the output path: the same cluster
// means the same API server and the bundle's Kubernetes CA.
func (s *Sequence) kubeconfigState() kubeconfigState {
	ks := kubeconfigState{Path: s.KubeconfigPath()}
	data, err := os.ReadFile(ks.Path)
	if err != nil {
		return ks
	}
	ks.Exists = true
	cfg, err := clientcmd.Load(data)
	if err != nil {
		ks.Why = "not a kubeconfig: " + err.Error()
		return ks
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster] == nil {
		ks.Why = "no current context"
		return ks
	}
	cl := cfg.Clusters[ctx.Cluster]
	switch {
	case cl.Server != s.inv.Cluster.Endpoint:
		ks.Why = fmt.Sprintf("server %s, cluster.endpoint %s", cl.Server, s.inv.Cluster.Endpoint)
	case s.bundle == nil || s.bundle.Certs == nil || s.bundle.Certs.K8s == nil || !containsCert(cl.CertificateAuthorityData, s.bundle.Certs.K8s.Crt):
		ks.Why = "its certificate authority is not the bundle's Kubernetes CA"
	default:
		ks.Ours = true
		ks.Why = "server " + cl.Server + " and the bundle's Kubernetes CA"
	}
	return ks
}

// kubeconfig keeps a kubeconfig for this cluster, refuses to replace one for
// another cluster without Force, and otherwise fetches it from the bootstrap
// node and writes it 0600.
func (s *Sequence) kubeconfig(ctx context.Context) (string, error) {
	ks := s.kubeconfigState()
	switch {
	case ks.Exists && ks.Ours:
		return rel(s.inv, ks.Path) + " exists for this cluster (" + ks.Why + "): kept", nil
	case ks.Exists && !s.opts.Force:
		return "", fmt.Errorf("%w: %s exists and is not this cluster's kubeconfig (%s): pass --force to replace it, or --kubeconfig-out to write elsewhere", ErrRefused, ks.Path, ks.Why)
	}
	m := bootstrapNode(s.inv)
	kctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	c, err := s.dialer.Client(kctx, m)
	if err != nil {
		return "", fmt.Errorf("dial %s: %w", m.Name, err)
	}
	defer c.Close()
	data, err := c.Kubeconfig(kctx)
	if err != nil {
		return "", fmt.Errorf("kubeconfig from %s: %w", m.Name, err)
	}
	if err := render.WriteSecretFile(ks.Path, data, ks.Exists); err != nil {
		return "", err
	}
	return fmt.Sprintf("fetched from %s, written to %s (mode 0600)", m.Name, ks.Path), nil
}
