package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/api/machine"
)

// Reset answers as machined's Reset (v1alpha1_server.go Reset): the
// request is checked first (plain errors, code Unknown), then the reset
// sequence starts in the background and the call is acked with an actor
// ID before any of it runs. The sequence (v1alpha1_sequencer.go Reset,
// metal mode) is what resetSequence models. In maintenance mode the sim
// does not serve Reset (Unimplemented); Talos' maintenance service does,
// for os:admin SideroLink peers only, which the sim's callers never are.
func (a *machineAPI) Reset(ctx context.Context, in *machine.ResetRequest) (*machine.ResetResponse, error) {
	t, s := target(ctx)

	if len(in.GetUserDisksToWipe()) > 0 {
		if in.GetMode() == machine.ResetRequest_SYSTEM_DISK {
			return nil, errors.New("reset failed: invalid input, wipe mode SYSTEM_DISK doesn't support UserDisksToWipe parameter")
		}

		disks := map[string]disk{}
		for _, d := range disksOf(s) {
			disks[d.dev] = d
		}

		for _, dev := range in.GetUserDisksToWipe() {
			d, ok := disks[dev]

			switch {
			case !ok:
				return nil, fmt.Errorf("reset user disk failed: device %s wasn't found", dev)
			case d.system:
				return nil, fmt.Errorf("reset user disk failed: device %s is the system disk", dev)
			}
		}
	}

	if len(in.GetSystemPartitionsToWipe()) > 0 && in.GetMode() == machine.ResetRequest_USER_DISKS {
		return nil, errors.New("reset failed: invalid input, wipe mode USER_DISKS doesn't support SystemPartitionsToWipe parameter")
	}

	for _, p := range in.GetSystemPartitionsToWipe() {
		if p.GetLabel() != "STATE" && p.GetLabel() != "EPHEMERAL" {
			return nil, fmt.Errorf("failed to get volume status with label %q: resource VolumeStatuses.block.talos.dev(runtime/%s@undefined) doesn't exist", p.GetLabel(), p.GetLabel())
		}
	}

	a.fleet.log.Info("sim: reset request received", "machine", t.name, "graceful", in.GetGraceful(), "reboot", in.GetReboot(), "mode", in.GetMode().String())

	go t.resetSequence(in)

	return &machine.ResetResponse{Messages: []*machine.Reset{{ActorId: actorID()}}}, nil
}

// resetSequence runs the reset sequence's phases that change what the sim
// shows, in order:
//
//   - a sequence that runs already (an upgrade) is not taken over: machined
//     logs "reset failed: locked" (controller.Run, runtime.ErrLocked);
//   - graceful on a control plane: "leave" (LeaveEtcd): when the node holds
//     etcd data and its etcd service is Running, Stopping or Failed, it
//     leaves as EtcdLeaveCluster does; a refusal fails the sequence, which
//     machined logs, and the machine stays as it is, up and configured;
//   - "reset" (ResetSystemDisk; with SystemPartitionsToWipe, the named
//     partitions): the STATE partition holds the config, EPHEMERAL the etcd
//     data; wiping STATE leaves the machine unconfigured;
//   - "reboot" (Reboot true): down for the reboot delay, then up in
//     maintenance mode when STATE was wiped (the boot medium has no
//     config), else with its config; "shutdown" (false): halted, down until
//     PowerOn.
//
// The drain and pod phases (CordonAndDrainNode, RemoveAllPods) only log
// their errors on Talos; the sim's pods run nowhere, so they change
// nothing the sim shows.
func (m *Machine) resetSequence(in *machine.ResetRequest) {
	// the reply goes out before the sequence does anything visible
	time.Sleep(10 * time.Millisecond)

	s := m.snap()
	if s.upgrading {
		m.fleet.log.Info("sim: reset failed: locked", "machine", m.name)

		return
	}

	if in.GetGraceful() && s.controlPlane() && s.etcdID != 0 && s.etcdStopped.IsZero() {
		if err := m.leaveEtcd(context.Background()); err != nil {
			m.fleet.log.Warn("sim: reset failed: failed to leave cluster", "machine", m.name, "error", err)

			return
		}
	}

	wipeState, wipeEphemeral, wipeDisk := false, false, false

	switch {
	case len(in.GetSystemPartitionsToWipe()) > 0:
		for _, p := range in.GetSystemPartitionsToWipe() {
			if p.GetWipe() {
				wipeState = wipeState || p.GetLabel() == "STATE"
				wipeEphemeral = wipeEphemeral || p.GetLabel() == "EPHEMERAL"
			}
		}
	case in.GetMode() != machine.ResetRequest_USER_DISKS:
		// ResetSystemDisk without labels wipes the whole system disk,
		// the boot partition and its install with it
		wipeState, wipeEphemeral, wipeDisk = true, true, true
	}

	m.mu.Lock()
	if wipeDisk {
		m.installed = false
	}

	if wipeState {
		m.persisted = nil
		m.staged, m.next, m.fallback = nil, nil, nil
	}

	if wipeEphemeral {
		// the data directory goes; a member in etcd's list stays there,
		// as it does on Talos after a reset that did not leave
		m.etcdID, m.etcdCluster, m.etcdRemoved, m.etcdStopped = 0, nil, time.Time{}, time.Time{}
		// so does what a failed restore left there, and the uploaded
		// snapshot (/var/lib/etcd.snapshot)
		m.etcdDataLeft, m.recovery = "", nil
		m.joinGen++
		// the CRI containerd's images were on it too
		m.forgetImagesLocked(true)
	}
	m.mu.Unlock()

	if wipeEphemeral {
		m.fleet.forgetDeadClusters()
	}

	m.fleet.log.Info("sim: reset", "machine", m.name, "state_wiped", wipeState, "ephemeral_wiped", wipeEphemeral)

	if in.GetReboot() {
		m.reboot(true)

		return
	}

	m.halt()
}

// halt shuts the machine down until PowerOn: its connections end, its
// kubelet stops posting, and it does not come back by itself.
func (m *Machine) halt() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()

		return
	}

	sess := m.session
	m.session = nil
	m.down, m.halted = true, true
	m.bootGen++

	if m.tryTimer != nil {
		m.tryTimer.Stop()
		m.tryTimer = nil
	}

	m.upgrading, m.stoppedAt, m.bootFailing = false, time.Time{}, false
	m.installerLocked = false
	m.forgetImagesLocked(false)
	m.mu.Unlock()

	if sess != nil {
		sess.stopGracefully()
	}

	m.sync()
}

// PowerOn boots a machine that was halted (a Reset without reboot); on
// any other machine it does nothing.
func (m *Machine) PowerOn() {
	m.mu.Lock()
	if !m.halted || m.closed {
		m.mu.Unlock()

		return
	}

	m.halted = false
	m.bootGen++
	gen := m.bootGen
	m.mu.Unlock()

	time.AfterFunc(m.fleet.rebootDelay, func() { m.boot(gen) })
}

// Halted reports whether the machine was shut down by a Reset and waits
// for PowerOn.
func (m *Machine) Halted() bool {
	m.mu.Lock()
	defer m.mu.Unlock()

	return m.halted
}

// Wipe is what losing a machine's system disk leaves, for test beds and
// the demo: a reset without leaving etcd (graceful false), the system disk
// wiped, a reboot into maintenance mode. It returns once the reset began.
func (m *Machine) Wipe() {
	m.resetSequence(&machine.ResetRequest{Reboot: true, Mode: machine.ResetRequest_SYSTEM_DISK})
}
