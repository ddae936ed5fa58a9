package sim

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/cosi-project/runtime/pkg/safe"
	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/resources/runtime"

	"devata.dev/devata/internal/talos"
)

// The unattended install of Talos 1.14 (v1.14.1 controllers/runtime/
// unattended_install.go UnattendedInstallController): a config carrying an
// UnattendedInstallConfig document is installed by that controller, not by
// the boot sequence's Install task. When the installer fails, reconcile
// sets UnattendedInstallStatus to phase failed with the installer's error
// and returns the error; the config stays (nothing reboots), and COSI's
// controller runtime restarts the controller after its backoff
// (cosi-project/runtime v1.16 controller/runtime/internal/rruntime run.go
// Run: cenkalti/backoff/v4 NewExponentialBackOff, 500ms first, times 1.5,
// randomized by ±50%, at most 60s, never giving up), which reconciles
// again and runs the installer again. An install that succeeds requests a
// reboot (phase waiting-for-reboot) and, after it, reports installed.

// Retry timing of COSI's controller restarts (cenkalti/backoff/v4
// exponential.go defaults).
const (
	unattendedFirstRetry = 500 * time.Millisecond
	unattendedMaxRetry   = 60 * time.Second
)

// unattendedInstall reports whether the UnattendedInstallController of the
// machine's Talos installs cfg: a 1.14 or later machine, a config with an
// UnattendedInstallConfig document.
func unattendedInstall(version string, cfg config.Provider) bool {
	minor, ok := talos.Minor(version)

	return ok && minor >= 14 && cfg != nil && cfg.UnattendedInstallConfig() != nil
}

// keepAndRetry is the controller's answer to a failed install of cfg
// (installErr): on a machine whose Talos installs cfg unattended, the
// config stays active (held in memory only: no install wrote STATE, so a
// reboot loses it), the status says failed, and the install is retried
// on the controller's backoff; it reports false, changing nothing, on any
// other machine or config (the install sequence's failure then stands).
func (m *Machine) keepAndRetry(cfg config.Provider, installErr error) bool {
	m.mu.Lock()
	version, gen := m.version, m.bootGen
	m.mu.Unlock()

	if !unattendedInstall(version, cfg) {
		return false
	}

	m.setConfig(cfg, true, false)
	m.leaveMaintenance()
	m.setUnattendedStatus(cfg, runtime.UnattendedInstallPhaseFailed, installErr)
	m.fleet.log.Info("sim: unattended install failed, retrying", "machine", m.name, "error", installErr)

	m.retryUnattended(cfg, gen, unattendedFirstRetry)

	return true
}

// leaveMaintenance ends the maintenance service's session once the apply
// has replied and opens apid's, on mTLS with the config now active (the
// boot sequence goes on past maintenance without a reboot).
func (m *Machine) leaveMaintenance() {
	m.mu.Lock()
	old := m.session

	if old != nil && !m.closed {
		m.draining = append(m.draining, old)
		m.openLocked()
	}
	m.mu.Unlock()

	if old != nil {
		old.stopGracefully()
	}
}

// retryUnattended runs the install again after the backoff interval,
// and again after a longer one while it fails, until it succeeds, the
// machine reboots (its in-memory config and the controller's run are gone
// with the boot) or it closes. No goroutine waits in between: a timer
// holds the next attempt.
func (m *Machine) retryUnattended(cfg config.Provider, gen int, interval time.Duration) {
	time.AfterFunc(randomized(interval), func() {
		m.mu.Lock()
		gone := m.closed || gen != m.bootGen
		m.mu.Unlock()

		if gone {
			return
		}

		if err := m.installedFrom(cfg); err != nil {
			m.setUnattendedStatus(cfg, runtime.UnattendedInstallPhaseFailed, err)
			m.retryUnattended(cfg, gen, min(time.Duration(float64(interval)*1.5), unattendedMaxRetry))

			return
		}

		m.fleet.log.Info("sim: unattended install succeeded on a retry", "machine", m.name)
		m.setUnattendedStatus(cfg, runtime.UnattendedInstallPhaseWaitingForReboot, nil)
		m.setConfig(cfg, false, true) // the install wrote STATE
		m.reboot(true)
		// the status is in memory: after the reboot the controller finds
		// the machine installed (InstalledFunc) and says so
		m.setUnattendedStatus(cfg, runtime.UnattendedInstallPhaseInstalled, nil)
	})
}

// randomized is cenkalti/backoff's getRandomValueFromInterval with a
// randomization factor of 0.5: uniform in [d/2, 3d/2].
func randomized(d time.Duration) time.Duration {
	return d/2 + time.Duration(rand.Int64N(int64(d)+1))
}

// setUnattendedStatus writes the UnattendedInstallStatus as reconcile's
// setStatus does: the config's installer image, the phase, the error.
func (m *Machine) setUnattendedStatus(cfg config.Provider, phase runtime.UnattendedInstallPhase, statusErr error) {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()

	st := runtime.NewUnattendedInstallStatus()
	spec := st.TypedSpec()
	spec.Image = cfg.UnattendedInstallConfig().InstallerImage()
	spec.Phase = phase

	if statusErr != nil {
		spec.Error = statusErr.Error()
	}

	if err := safe.StateModify(context.Background(), m.st, st, func(cur *runtime.UnattendedInstallStatus) error {
		*cur.TypedSpec() = *spec

		return nil
	}); err != nil {
		m.fleet.log.Error("sim: write UnattendedInstallStatus", "machine", m.name, "error", err)
	}
}
