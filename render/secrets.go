// Package bootstrap owns the secrets bundle (talosctl-compatible) and
// rendering each machine's desired Talos config from the inventory. The
// first build is package bootstrap; redaction is package redact.
// It never decides drift; checks do.
package render

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/siderolabs/talos/pkg/machinery/config"
	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/internal/outfile"
	"devata.dev/devata/inventory"
)

// SecretsFileMode is the mode every secret file devata writes gets.
const SecretsFileMode fs.FileMode = 0o600

// ErrExists is returned when a write would replace an existing file without force.
var ErrExists = errors.New("file exists")

// NewSecrets creates a new secrets bundle for the given Talos version, as
// `talosctl gen secrets` does (about 1-2 s: it makes an RSA-4096 key).
func NewSecrets(talosVersion string) (*secrets.Bundle, error) {
	contract, err := config.ParseContractFromVersion(talosVersion)
	if err != nil {
		return nil, fmt.Errorf("talos version %s: %w", talosVersion, err)
	}
	return secrets.NewBundle(secrets.NewFixedClock(time.Now()), contract)
}

// SecretsFromConfig recovers the secrets bundle from a control-plane machine
// config, for reconstruction when the bundle itself is lost.
func SecretsFromConfig(path string) (*secrets.Bundle, error) {
	cfg, err := configloader.NewFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load machine config %s: %w", path, err)
	}
	if !cfg.Machine().Type().IsControlPlane() {
		return nil, fmt.Errorf("%s is a %s config: the bundle can only be recovered from a control-plane config, which carries the CA keys", path, cfg.Machine().Type())
	}
	b, err := secrets.NewBundleFromConfig(secrets.NewFixedClock(time.Now()), cfg)
	if err != nil {
		return nil, fmt.Errorf("recover the bundle from %s: %w", path, err)
	}
	if err := b.Validate(config.TalosVersionCurrent); err != nil {
		return nil, fmt.Errorf("recovered bundle from %s is incomplete: %w", path, err)
	}
	return b, nil
}

// LoadSecrets reads a talosctl-format secrets bundle, in clear or encrypted
// (an age file, binary or armored, or a sops YAML file with age recipients),
// opening an encrypted one with the identities AgeIdentitiesFromEnv names.
func LoadSecrets(path string) (*secrets.Bundle, error) {
	return LoadSecretsWith(path, AgeIdentitiesFromEnv(nil))
}

// LoadSecretsWith is LoadSecrets with the age identities given.
func LoadSecretsWith(path string, ids AgeIdentities) (*secrets.Bundle, error) {
	b, format, err := readBundle(path, ids)
	if err != nil {
		var pe *fs.PathError
		var fe *inventory.FileError
		var de *DecryptError
		switch {
		case errors.As(err, &de):
			return nil, fmt.Errorf("load secrets bundle: %w", err)
		case errors.As(err, &pe), errors.As(err, &fe):
		default:
			// Decode errors quote the offending value, which may be a key: keep only the line.
			if format != FormatPlain {
				return nil, fmt.Errorf("load secrets bundle %s: it decrypts (%s), but the clear text is not a talosctl secrets bundle%s: re-encrypt the right bundle", path, format, yamlErrorLine(err))
			}
			err = fmt.Errorf("not a talosctl secrets bundle%s", yamlErrorLine(err))
		}
		return nil, fmt.Errorf("load secrets bundle %s: %w (create one with `devata gen secrets`, or recover it with `devata gen secrets --from-controlplane-config`)", path, err)
	}
	if err := b.Validate(config.TalosVersionCurrent); err != nil {
		return nil, fmt.Errorf("secrets bundle %s is incomplete or damaged: %w (restore it from your backup, or recover it with `devata gen secrets --from-controlplane-config`)", path, err)
	}
	// machinery's Validate does not look at the token, and the API server
	// refuses one of another shape: every kubelet's join would fail
	if b.Secrets != nil && !bootstrapTokenRE.MatchString(b.Secrets.BootstrapToken) {
		return nil, fmt.Errorf("secrets bundle %s: secrets.bootstraptoken is not a Kubernetes bootstrap token (six then sixteen characters of [a-z0-9], joined by a dot; the value is not shown): restore the bundle from your backup, or recover it with `devata gen secrets --from-controlplane-config`", path)
	}
	return b, nil
}

// bootstrapTokenRE is a bootstrap token's shape (k8s.io/cluster-bootstrap
// BootstrapTokenPattern).
var bootstrapTokenRE = regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

func yamlErrorLine(err error) string {
	if m := yamlLineRE.FindStringSubmatch(err.Error()); m != nil {
		return " (YAML error at line " + m[1] + ")"
	}
	return ""
}

// MarshalSecrets encodes a bundle exactly as `talosctl gen secrets` writes it.
func MarshalSecrets(b *secrets.Bundle) ([]byte, error) {
	return yaml.Marshal(b)
}

// WriteSecrets writes a bundle with mode 0600; it refuses to replace an
// existing file unless force is set.
func WriteSecrets(path string, b *secrets.Bundle, force bool) error {
	data, err := MarshalSecrets(b)
	if err != nil {
		return fmt.Errorf("encode secrets bundle: %w", err)
	}
	return WriteSecretFile(path, data, force)
}

// WriteSecretFile writes data atomically with mode 0600: to a temporary file in
// the same directory, then renamed over path (internal/outfile: only a
// regular file is replaced; a symbolic link or a device at path is
// refused, with --force too). Without force an existing path is left alone
// and ErrExists returned.
func WriteSecretFile(path string, data []byte, force bool) error {
	if !force {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s: %w (pass --force to replace it; keep a copy first, it may be the only key to a running cluster)", path, ErrExists)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	err := outfile.Write(path, SecretsFileMode, !force, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%s: %w (pass --force to replace it)", path, ErrExists)
	}
	return err
}

// readBundle is machinery's secrets.LoadBundle over a bounded read of a
// regular file (inventory.ReadFile), decrypting it in memory first when its
// content says it is encrypted. format is what it was found to be.
func readBundle(path string, ids AgeIdentities) (*secrets.Bundle, string, error) {
	data, err := inventory.ReadFile(path)
	if err != nil {
		return nil, FormatPlain, err
	}
	b := &secrets.Bundle{Clock: secrets.NewClock()}
	format, doc, err := detectFormat(data)
	if err != nil {
		return nil, format, &DecryptError{Path: path, Format: format, Reason: err.Error()}
	}
	if src := ids.given(); format == FormatPlain && src != "" {
		return nil, format, &DecryptError{Path: path, Format: format, Reason: fmt.Sprintf("it is in clear text, though an age identity is given (%s): a bundle meant to be encrypted is not. Encrypt it (devata gen secrets --encrypt-to RECIPIENT, or sops --encrypt), or give no identity to read a clear-text one", src)}
	}
	switch format {
	case FormatAge:
		plain, err := decryptAge(path, data, ids)
		if err != nil {
			return nil, format, err
		}
		defer clear(plain)
		err = yaml.Unmarshal(plain, b)
		return b, format, err
	case FormatSOPS:
		if err := decryptSOPS(path, doc, ids); err != nil {
			return nil, format, err
		}
		return b, format, doc.Decode(b)
	}
	return b, format, yaml.Unmarshal(data, b)
}
