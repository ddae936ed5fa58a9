package netcheck

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	streamhttp "k8s.io/streaming/pkg/httpstream"
)

// Execer runs a command in a pod's container through the API server's
// pods/exec and returns what it wrote. A command that ran but exited
// non-zero returns its output and an *ExitError.
type Execer interface {
	Exec(ctx context.Context, namespace, pod, container string, cmd []string) (stdout, stderr []byte, err error)
}

// ExitError is a command that ran in the container and exited non-zero.
type ExitError struct {
	Code   int
	Stderr string
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return fmt.Sprintf("command exited %d: %s", e.Code, e.Stderr)
	}

	return fmt.Sprintf("command exited %d", e.Code)
}

// PodsExec is the Execer of a cluster: WebSocket (v5) first, falling back
// to SPDY when the API server or a proxy on the way cannot upgrade to
// WebSocket, as the cilium CLI and kubectl do.
type PodsExec struct {
	config *rest.Config
	rest   rest.Interface
}

// NewPodsExec builds the Execer of the cluster cfg points at.
func NewPodsExec(cfg *rest.Config) (*PodsExec, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}

	return &PodsExec{config: cfg, rest: kube.CoreV1().RESTClient()}, nil
}

// Exec runs cmd; stdin is closed, no TTY.
func (p *PodsExec) Exec(ctx context.Context, namespace, pod, container string, cmd []string) ([]byte, []byte, error) {
	u := p.rest.Post().Resource("pods").Namespace(namespace).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Container: container, Command: cmd, Stdout: true, Stderr: true}, scheme.ParameterCodec).URL()

	ws, err := remotecommand.NewWebSocketExecutor(p.config, http.MethodGet, u.String())
	if err != nil {
		return nil, nil, fmt.Errorf("exec %s/%s: %w", namespace, pod, err)
	}

	spdy, err := remotecommand.NewSPDYExecutor(p.config, http.MethodPost, u)
	if err != nil {
		return nil, nil, fmt.Errorf("exec %s/%s: %w", namespace, pod, err)
	}

	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		// Fall back when the WebSocket upgrade itself failed (an old API
		// server or a proxy on the way), not when it was refused.
		return (streamhttp.IsUpgradeFailure(err) || streamhttp.IsHTTPSProxyError(err)) && !IsForbidden(err)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("exec %s/%s: %w", namespace, pod, err)
	}

	var stdout, stderr bytes.Buffer

	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})

	var exit utilexec.CodeExitError
	if errors.As(err, &exit) {
		return stdout.Bytes(), stderr.Bytes(), &ExitError{Code: exit.Code, Stderr: tail(stderr.Bytes())}
	}

	if err != nil {
		return stdout.Bytes(), stderr.Bytes(), &execError{ref: namespace + "/" + pod + " -c " + container, err: err}
	}

	return stdout.Bytes(), stderr.Bytes(), nil
}

// execError is a failed exec. Its text drops the query of the kubelet URLs
// that API server errors quote: the whole command, URL-encoded.
type execError struct {
	ref string
	err error
}

var execURLQuery = regexp.MustCompile(`(/exec/[^"?\s]*)\?[^"\s]*`)

func (e *execError) Error() string {
	return "exec " + e.ref + ": " + execURLQuery.ReplaceAllString(e.err.Error(), "$1?…")
}

func (e *execError) Unwrap() error { return e.err }

// tail is the last line-ish of a command's stderr, for an error message.
func tail(b []byte) string {
	b = bytes.TrimSpace(b)
	if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}

	if len(b) > 200 {
		b = append(b[:200:200], "…"...)
	}

	return string(b)
}

// IsForbidden reports whether an exec failed because the caller may not
// create pods/exec there: that is a missing permission, never drift.
func IsForbidden(err error) bool {
	if apierrors.IsForbidden(err) {
		return true
	}

	// A refused WebSocket upgrade carries the API server's Status as its
	// cause, without unwrapping to it. client-go's WebSocket round tripper
	// (transport/websocket/roundtripper.go, RoundTrip) builds it from
	// k8s.io/streaming's httpstream; the deprecated copy in apimachinery's
	// util/httpstream is no longer constructed by client-go.
	var upgrade *streamhttp.UpgradeFailureError
	if errors.As(err, &upgrade) {
		return apierrors.IsForbidden(upgrade.Cause)
	}

	return false
}
