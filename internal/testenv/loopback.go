package testenv

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// loopbackProcess is a server binary the test bed runs on a loopback
// port (node_exporter, versitygw): it dies with the test process
// (Pdeathsig), keeps the last 16 KiB of its output for errors and logs,
// and stops with SIGTERM, then SIGKILL.
type loopbackProcess struct {
	name string // "versitygw v1.8.0", for messages
	addr string // 127.0.0.1:PORT

	cmd  *exec.Cmd
	out  *tail
	done chan struct{}
}

// startLoopback picks a free loopback port, starts the command that
// command makes for it, and waits until ready says the server answers
// there (at most startTimeout). The port is free when picked but may be
// taken before the binary binds it: on "address already in use" it
// starts again on another port, three times in all.
func startLoopback(name string, command func(addr string) *exec.Cmd, ready func(addr string) bool) (*loopbackProcess, error) {
	var err error
	for range 3 {
		var p *loopbackProcess
		if p, err = startLoopbackOnce(name, command, ready); err == nil {
			return p, nil
		}
		if !strings.Contains(err.Error(), "address already in use") {
			break
		}
	}
	return nil, err
}

func startLoopbackOnce(name string, command func(addr string) *exec.Cmd, ready func(addr string) bool) (*loopbackProcess, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := l.Addr().String()
	l.Close()
	p := &loopbackProcess{
		name: name,
		addr: addr,
		cmd:  command(addr),
		out:  &tail{max: 16 << 10},
		done: make(chan struct{}),
	}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	deadline := time.Now().Add(startTimeout)
	for !ready(addr) {
		select {
		case <-p.done:
			return nil, fmt.Errorf("%s exited at start: %s", name, p.out.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return nil, fmt.Errorf("%s did not serve on %s within %s: %s", name, addr, startTimeout, p.out.String())
		}
	}
	return p, nil
}

// Stop ends the server (SIGTERM, then SIGKILL after 10 seconds); its
// address is then down. Stopping twice is fine.
func (p *loopbackProcess) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
