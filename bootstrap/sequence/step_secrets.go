package sequence

import (
	"errors"
	"io/fs"

	"devata.dev/devata/bootstrap"
)

// secrets loads the bundle, or creates it (write) only when it is missing.
func (s *Sequence) secrets(write bool) (string, error) {
	s.secretsPath = s.inv.SecretsPath()
	ids := bootstrap.AgeIdentitiesFromEnv(nil)
	if s.opts.AgeIdentities != nil {
		ids = *s.opts.AgeIdentities
	}
	b, err := bootstrap.LoadSecretsWith(s.secretsPath, ids)
	if err == nil {
		s.bundle = b
		return "loaded " + rel(s.inv, s.secretsPath) + " (kept as it is)", nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", err // damaged or unreadable: never replaced
	}
	s.secretsMissing = true
	if b, err = bootstrap.NewSecrets(s.inv.Cluster.TalosVersion); err != nil {
		return "", err
	}
	s.bundle = b
	if !write {
		return "missing: a throwaway bundle in memory", nil
	}
	if err := bootstrap.WriteSecrets(s.secretsPath, b, false); err != nil {
		return "", err
	}
	s.secretsMissing = false
	return "created " + rel(s.inv, s.secretsPath) + " (mode 0600): back it up now, it is the only key to this cluster", nil
}
