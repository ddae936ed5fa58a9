package sim

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
)

// One gRPC server serves the whole fleet: each machine only adds a listener
// (and the one accept goroutine gRPC runs per listener). The listener stays
// open for the machine's whole life, so a reboot never gives its port away;
// while the machine is down (rebooting, unreachable) it closes every
// connection it accepts at once. Each boot opens a session: the mode and TLS
// configuration its connections get, and the connections to drop when it ends.

// machineListener is a machine's listener for its whole life.
type machineListener struct {
	net.Listener

	m *Machine
}

func (l *machineListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}

		l.m.mu.Lock()
		s := l.m.session
		l.m.mu.Unlock()

		if mc := s.add(c); mc != nil {
			return mc, nil
		}

		c.Close() //nolint:errcheck // down: refuse by closing
	}
}

// session is one boot of a machine as its connections see it.
type session struct {
	m           *Machine
	tls         *tls.Config
	maintenance bool

	mu     sync.Mutex
	conns  map[*machineConn]struct{}
	closed bool

	// ended is closed once stop has dropped the connections.
	ended   chan struct{}
	endOnce sync.Once
}

func newSession(m *Machine, cfg *tls.Config, maintenance bool) *session {
	return &session{m: m, tls: cfg, maintenance: maintenance, conns: map[*machineConn]struct{}{}, ended: make(chan struct{})}
}

// add admits a connection, or returns nil when the session has ended.
func (s *session) add(c net.Conn) *machineConn {
	if s == nil {
		return nil
	}

	s.mu.Lock()
	defer s.mu.Unlock()

	if s.closed {
		return nil
	}

	mc := &machineConn{Conn: c, s: s}
	s.conns[mc] = struct{}{}

	return mc
}

// stop ends the session: its connections are dropped.
func (s *session) stop() {
	s.mu.Lock()
	s.closed = true
	conns := s.conns
	s.conns = map[*machineConn]struct{}{}
	s.mu.Unlock()

	for c := range conns {
		c.Conn.Close() //nolint:errcheck
	}

	s.endOnce.Do(func() { close(s.ended) })
}

// waitEnded waits until the session was stopped, at most limit.
func (s *session) waitEnded(limit time.Duration) {
	t := time.NewTimer(limit)
	defer t.Stop()

	select {
	case <-s.ended:
	case <-t.C:
	}
}

// stopGracefully drops the session's connections once the machine's calls in
// flight (the one that asked for the reboot) have replied, or after a second.
// New connections are already refused: the machine has no session.
func (s *session) stopGracefully() {
	go func() {
		deadline := time.Now().Add(time.Second)

		for s.m.inflight.Load() > 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}

		// The last reply is still on its way out of gRPC's write loop. On
		// Talos it always arrives: the maintenance server replies and only
		// then does the installer run, and machined's reboot after an apply
		// goes through the sequencer, both far slower than a reply. 20 ms
		// lost the reply under the race detector on a busy 2-core machine.
		time.Sleep(100 * time.Millisecond)
		s.stop()
	}()
}

type machineConn struct {
	net.Conn

	s    *session
	once sync.Once
}

func (c *machineConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})

	return c.Conn.Close()
}

// authInfo is what a handler learns about its connection.
type authInfo struct {
	credentials.TLSInfo

	endpoint    *Machine
	maintenance bool
}

// fleetCreds does each connection's TLS handshake with the configuration of
// the machine (and mode) it reached.
type fleetCreds struct{}

func (fleetCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	mc, ok := raw.(*machineConn)
	if !ok {
		return nil, nil, errors.New("sim: connection from an unknown listener")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	conn := tls.Server(raw, mc.s.tls)
	if err := conn.HandshakeContext(ctx); err != nil {
		conn.Close() //nolint:errcheck

		return nil, nil, err
	}

	info := authInfo{
		TLSInfo: credentials.TLSInfo{
			State:          conn.ConnectionState(),
			CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
		},
		endpoint:    mc.s.m,
		maintenance: mc.s.maintenance,
	}

	return conn, info, nil
}

func (fleetCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("sim: server-side credentials")
}

func (fleetCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c fleetCreds) Clone() credentials.TransportCredentials { return c }

func (fleetCreds) OverrideServerName(string) error { return nil }
