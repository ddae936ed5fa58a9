package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// kubeletServer is a machine's kubelet HTTPS endpoint, as the API server
// reaches it for pods/exec: Node.status.daemonEndpoints.kubeletEndpoint.port
// on the node's InternalIP. It serves exec into the pods the sim runs on the
// machine (the cilium agent); nothing else of the kubelet API.
type kubeletServer struct {
	m    *Machine
	ln   net.Listener
	srv  *http.Server
	port int
}

// kubeletCert is the self-signed serving certificate every simulated kubelet
// shares: a Talos kubelet without rotate-server-certificates serves a
// self-signed one too, and the API server does not verify it unless given
// --kubelet-certificate-authority.
var kubeletCert = sync.OnceValues(func() (tls.Certificate, error) {
	return selfSigned("devata-sim-kubelet", net.IPv4(127, 0, 0, 1), net.IPv6loopback)
})

// kubelet starts the machine's kubelet endpoint on first use and returns its
// port.
func (m *Machine) kubelet() (int, error) {
	m.kubeletMu.Lock()
	defer m.kubeletMu.Unlock()

	if m.kubeletSrv != nil {
		return m.kubeletSrv.port, nil
	}

	cert, err := kubeletCert()
	if err != nil {
		return 0, fmt.Errorf("kubelet certificate: %w", err)
	}

	m.mu.Lock()
	host, closed := m.host, m.closed
	m.mu.Unlock()

	if closed {
		return 0, errors.New("machine closed")
	}

	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("kubelet listen: %w", err)
	}

	k := &kubeletServer{m: m, ln: ln, port: ln.Addr().(*net.TCPAddr).Port}
	mux := http.NewServeMux()
	mux.HandleFunc("/exec/{namespace}/{pod}/{container}", k.exec)
	mux.HandleFunc("/exec/{namespace}/{pod}/{uid}/{container}", k.exec)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }) //nolint:errcheck
	k.srv = &http.Server{
		Handler:           mux,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          nil,
	}

	go k.srv.ServeTLS(ln, "", "") //nolint:errcheck // ends with Close

	m.kubeletSrv = k

	return k.port, nil
}

func (m *Machine) closeKubelet() {
	m.kubeletMu.Lock()
	defer m.kubeletMu.Unlock()

	if m.kubeletSrv != nil {
		m.kubeletSrv.srv.Close() //nolint:errcheck
		m.kubeletSrv = nil
	}
}

// exec serves /exec/{namespace}/{pod}/{container}?command=…, the request the
// API server's pods/exec proxy makes, with the CRI streaming server's own
// remotecommand code (SPDY v1–v4; the API server translates WebSocket
// clients). A machine that is down or unreachable drops the connection, as a
// kubelet that does not answer would fail the proxy's dial.
func (k *kubeletServer) exec(w http.ResponseWriter, req *http.Request) {
	s := k.m.snap()
	if s.down || s.faults.Unreachable {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close() //nolint:errcheck
				return
			}
		}

		http.Error(w, "kubelet down", http.StatusServiceUnavailable)

		return
	}

	ns, pod, container := req.PathValue("namespace"), req.PathValue("pod"), req.PathValue("container")

	agent := k.m.fleet.agentPodOn(k.m.name)
	if agent == nil || agent.namespace != ns || agent.name != pod {
		http.Error(w, fmt.Sprintf("pod %s/%s not found on node %s", ns, pod, s.hostname()), http.StatusNotFound)
		return
	}

	if container != ciliumAgentContainer {
		http.Error(w, fmt.Sprintf("container %q not found in pod %s/%s", container, ns, pod), http.StatusNotFound)
		return
	}

	opts, err := remotecommand.NewOptions(req)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}

	k.m.count("kubelet/exec")
	cmd := req.URL.Query()[remotecommandCommandParam]
	remotecommand.ServeExec(w, req, agentExecutor{m: k.m}, ns+"/"+pod, "", container, cmd, opts,
		time.Minute, remotecommand.DefaultStreamCreationTimeout, remotecommand.SupportedStreamingProtocols)
}

const remotecommandCommandParam = "command"

// agentExecutor runs commands in the machine's cilium-agent container.
type agentExecutor struct{ m *Machine }

func (e agentExecutor) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string, in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan remotecommand.TerminalSize, _ time.Duration) error {
	code := e.m.fleet.runInAgent(ctx, e.m, cmd, in, out, errw)
	if code != 0 {
		return utilexec.CodeExitError{Err: errors.New("command terminated with exit code " + strconv.Itoa(code)), Code: code}
	}

	return nil
}
