package bootstrap

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"devata.dev/devata/render"
)

// secrets loads the bundle, or creates it (write) only when it is missing.
func (s *Sequence) secrets(write bool) (string, error) {
	s.secretsPath = s.inv.SecretsPath()
	ids := render.AgeIdentitiesFromEnv(nil)
	if s.opts.AgeIdentities != nil {
		ids = *s.opts.AgeIdentities
	}
	b, err := render.LoadSecretsWith(s.secretsPath, ids)
	if err == nil {
		s.bundle = b
		return "loaded " + rel(s.inv, s.secretsPath) + " (kept as it is)", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err // damaged or unreadable: never replaced
	}
	s.secretsMissing = true
	if b, err = render.NewSecrets(s.inv.Cluster.TalosVersion); err != nil {
		return "", err
	}
	s.bundle = b
	if !write {
		return "missing: a new bundle in memory, written only once every machine is found in maintenance mode (a new bundle cannot reach a configured one)", nil
	}
	if err := render.WriteSecrets(s.secretsPath, b, false); err != nil {
		return "", err
	}
	s.secretsMissing = false
	return "created " + rel(s.inv, s.secretsPath) + " (mode 0600): back it up now, it is the only key to this cluster", nil
}

// foreignBundle refuses a run whose bundle was missing when machines
// already run a config (they answer on mTLS, or with a CA the
// talosconfig does not trust): their configs came from a bundle devata
// does not have, and a new one would neither reach them nor be theirs.
func (s *Sequence) foreignBundle(configured []string) error {
	return fmt.Errorf("%w: %s is missing, and %s already %s a config of this cluster's own bundle: a new bundle would hold other CAs and could never configure %s; no bundle was written. "+
		"Recover the cluster's bundle: devata gen secrets --from-controlplane-config FILE (FILE from talosctl -n CONTROL-PLANE get machineconfig -o jsonpath='{.spec}' with the cluster's talosconfig), or restore it from a backup or its encrypted copy, to %s",
		ErrRefused, rel(s.inv, s.secretsPath), strings.Join(configured, ", "), plural(len(configured), "runs", "run"), plural(len(configured), "it", "them"), rel(s.inv, s.secretsPath))
}

// writeMissingSecrets writes the bundle made in memory for a missing one:
// every machine was found in maintenance mode, so the cluster is new.
func (s *Sequence) writeMissingSecrets() (string, error) {
	if err := render.WriteSecrets(s.secretsPath, s.bundle, false); err != nil {
		return "", err
	}
	s.secretsMissing = false
	return "created " + rel(s.inv, s.secretsPath) + " (mode 0600): back it up now, it is the only key to this cluster", nil
}
