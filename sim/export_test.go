package sim

// SetInstalled says whether the machine's system disk holds a Talos
// install. The sim's API cannot reach a configured machine without one
// (Talos' Install task installs before the config applies, and 1.13's
// maintenance mode answers os:reader callers only, whom
// LifecycleService refuses), so the checks that depend on it are tested
// through this door.
func (m *Machine) SetInstalled(installed bool) {
	m.mu.Lock()
	defer m.mu.Unlock()

	m.installed = installed
}
