package render

// Encrypted bundles, so that the bundle can live in Git: age files (binary
// or ASCII-armored, as `age -e [-a]` writes them) and sops YAML files whose
// data key is wrapped for age recipients. The kind is told from the content,
// never from the file name. Decryption happens in memory only: no clear text
// is ever written, and no error quotes the file, an identity or a value.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"filippo.io/age"
	"filippo.io/age/armor"
	"github.com/siderolabs/talos/pkg/machinery/config/generate/secrets"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/inventory"
)

// The environment variables sops reads its age identities from; devata reads
// the same ones, so one setting serves sops, age-encrypted bundles and devata.
const (
	EnvAgeKey     = "SOPS_AGE_KEY"
	EnvAgeKeyFile = "SOPS_AGE_KEY_FILE"
)

// Bundle encodings LoadSecrets tells apart by content.
const (
	FormatPlain = ""
	FormatAge   = "age"
	FormatSOPS  = "sops"
)

const ageBinaryHeader = "age-encryption.org/v1\n"

// DecryptError is why an encrypted bundle could not be opened. Its message
// names the file and what to do next; it never quotes the file's content or
// key material.
type DecryptError struct {
	Path   string
	Format string // FormatAge or FormatSOPS; FormatPlain when refused before decrypting
	Reason string
	// NoIdentity is set when no identity was configured or none matched:
	// the file may be fine, the key is what is missing.
	NoIdentity bool
}

func (e *DecryptError) Error() string {
	if e.Format == FormatPlain { // refused before any decryption (detectFormat, readBundle)
		return fmt.Sprintf("%s: %s", e.Path, e.Reason)
	}
	return fmt.Sprintf("%s is %s-encrypted: %s", e.Path, e.Format, e.Reason)
}

// SettingAgeIdentity names devata's own identity-file setting in messages:
// the flag, its DEVATA_* variable and the settings-file key.
const SettingAgeIdentity = "--age-identity (DEVATA_AGE_IDENTITY, age-identity in the settings file)"

// AgeIdentities says where the age identities that open an encrypted bundle
// are read from. Nothing is read until a bundle turns out to be encrypted.
type AgeIdentities struct {
	// Files are identity files given to devata itself (SettingAgeIdentity),
	// one identity a line. Each must exist. When any is given they are the
	// only source: sops' variables and default file below are not read, as
	// a flag overrides the environment.
	Files []string
	// Key holds identities inline, separated by white space (SOPS_AGE_KEY).
	Key string
	// KeyFile is an identity file, one identity a line (SOPS_AGE_KEY_FILE).
	// It must exist when set.
	KeyFile string
	// DefaultFile is sops' default identity file, read only when it exists.
	DefaultFile string
	// AllowShared takes identity files that others than their owner may
	// read or write; they are refused otherwise, as ssh refuses such keys.
	AllowShared bool
}

// AgeIdentitiesFromEnv is where sops looks for age identities, read through
// getenv (os.Getenv when nil): SOPS_AGE_KEY, SOPS_AGE_KEY_FILE, then
// <user config dir>/sops/age/keys.txt ($XDG_CONFIG_HOME or ~/.config on
// Linux). LoadSecrets reads the process environment itself, unlike devata's
// own settings, because this is a convention shared with sops that every
// command loading the bundle must honour alike.
func AgeIdentitiesFromEnv(getenv func(string) string) AgeIdentities {
	if getenv == nil {
		getenv = os.Getenv
	}
	ids := AgeIdentities{Key: getenv(EnvAgeKey), KeyFile: getenv(EnvAgeKeyFile)}
	dir := ""
	if x := getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) && runtime.GOOS != "windows" {
		dir = x // as os.UserConfigDir on Linux, and as sops on macOS
	} else if runtime.GOOS == "linux" {
		if home := getenv("HOME"); home != "" {
			dir = filepath.Join(home, ".config")
		}
	} else {
		dir, _ = os.UserConfigDir()
	}
	if dir != "" {
		ids.DefaultFile = filepath.Join(dir, "sops", "age", "keys.txt")
	}
	return ids
}

// identitySet is the parsed identities and where they came from (names of
// variables and files, for messages).
type identitySet struct {
	ids     []age.Identity
	sources []string
}

func (s identitySet) describe() string {
	return fmt.Sprintf("%d age %s from %s", len(s.ids), plural(len(s.ids), "identity", "identities"), strings.Join(s.sources, ", "))
}

// nextStep says how to give devata the identity that opens a bundle.
func (a AgeIdentities) nextStep() string {
	if len(a.Files) > 0 {
		return "point " + SettingAgeIdentity + " at the age identity file that can decrypt it; " + EnvAgeKey + ", " + EnvAgeKeyFile + " and sops' keys.txt are not read while it is set"
	}
	return "pass --age-identity FILE, or set " + EnvAgeKeyFile + " to the age identity file that can decrypt it (or " + EnvAgeKey + " to the identity itself)"
}

// load parses every configured source. An unreadable or malformed source is
// an error: a typo in SOPS_AGE_KEY_FILE must not read as "wrong key".
// given names the identity devata was given to open the bundle with, ""
// when none: an identity file of its own setting or SOPS_AGE_KEY_FILE that
// exists (deploy/ points the setting at a Secret that may not be
// mounted), or SOPS_AGE_KEY. sops' default file is not a sign: it serves
// every sops file of the user's.
func (a AgeIdentities) given() string {
	for _, f := range a.Files {
		if _, err := os.Stat(f); err == nil {
			return "age identity file " + f
		}
	}
	if len(a.Files) > 0 {
		return ""
	}
	if strings.TrimSpace(a.Key) != "" {
		return EnvAgeKey
	}
	if a.KeyFile != "" {
		if _, err := os.Stat(a.KeyFile); err == nil {
			return EnvAgeKeyFile + " (" + a.KeyFile + ")"
		}
	}
	return ""
}

// private refuses an identity file that others than its owner may read or
// write (group or world bits), as ssh refuses a private key (its
// "UNPROTECTED PRIVATE KEY FILE"), unless AllowShared. A file that cannot
// be looked at is left to the read that follows to report.
func (a AgeIdentities) private(path, setting string) error {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || a.AllowShared || fi.Mode().Perm()&0o077 == 0 {
		return nil
	}
	return fmt.Errorf("age identity file %s (%s) may be read by others than its owner (mode %04o): chmod 600 it, as ssh asks of private keys; or pass --allow-shared-age-identity (DEVATA_ALLOW_SHARED_AGE_IDENTITY) for a file shared on purpose, such as a Kubernetes Secret mounted with an fsGroup", path, setting, fi.Mode().Perm())
}

func (a AgeIdentities) load() (identitySet, error) {
	var set identitySet
	add := func(source string, data []byte, perLine bool) error {
		ids, err := parseAgeIdentities(source, data, perLine)
		if err != nil {
			return err
		}
		set.ids = append(set.ids, ids...)
		set.sources = append(set.sources, source)
		return nil
	}
	if len(a.Files) > 0 {
		for _, f := range a.Files {
			if strings.TrimSpace(f) == "" {
				return set, fmt.Errorf("an empty path is given as an age identity file: set %s to the identity file's path, or unset it", SettingAgeIdentity)
			}
			if err := a.private(f, SettingAgeIdentity); err != nil {
				return set, err
			}
			data, err := inventory.ReadFile(f)
			if err != nil {
				return set, fmt.Errorf("age identity file %s cannot be read (%s): point %s at your age identity file (age-keygen -o FILE writes one)", f, readProblem(err), SettingAgeIdentity)
			}
			err = add("age identity file "+f, data, true)
			clear(data)
			if err != nil {
				return set, err
			}
		}
		return set, nil
	}
	if strings.TrimSpace(a.Key) != "" {
		if err := add(EnvAgeKey, []byte(a.Key), false); err != nil {
			return set, err
		}
	}
	if a.KeyFile != "" {
		if err := a.private(a.KeyFile, EnvAgeKeyFile); err != nil {
			return set, err
		}
		data, err := inventory.ReadFile(a.KeyFile)
		if err != nil {
			return set, fmt.Errorf("%s names %s, which cannot be read (%s): point it at your age identity file", EnvAgeKeyFile, a.KeyFile, readProblem(err))
		}
		defer clear(data)
		if err := add(EnvAgeKeyFile+" ("+a.KeyFile+")", data, true); err != nil {
			return set, err
		}
	}
	if a.DefaultFile != "" && a.DefaultFile != a.KeyFile {
		data, err := inventory.ReadFile(a.DefaultFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return set, fmt.Errorf("sops' default identity file %s cannot be read (%s): fix it, or set %s", a.DefaultFile, readProblem(err), EnvAgeKeyFile)
		default:
			defer clear(data)
			if err := add(a.DefaultFile, data, true); err != nil {
				return set, err
			}
		}
	}
	return set, nil
}

// Load reads the configured identities for an age file other than the
// bundle (an encrypted etcd snapshot: package backup's Keys): the
// identities and where they came from, for messages. None configured is
// no error; a source that does not read or parse is.
func (a AgeIdentities) Load() ([]age.Identity, string, error) {
	set, err := a.load()
	if err != nil {
		return nil, "", err
	}
	return set.ids, set.describe(), nil
}

// BundleRecipients are the age recipients (age1…) the encrypted bundle at
// path is wrapped for, as the file records them: a sops file lists them in
// its metadata (one key group). An age file records none (its header holds
// only the wrapped file keys), and a bundle in clear has none: both are
// errors saying to pass the recipients instead. Nothing secret is read.
func BundleRecipients(path string) ([]string, error) {
	data, err := inventory.ReadFile(path)
	if err != nil {
		return nil, err
	}
	defer clear(data)
	format, doc, err := detectFormat(data)
	switch {
	case err != nil:
		return nil, &DecryptError{Path: path, Reason: err.Error()}
	case format == FormatAge:
		return nil, fmt.Errorf("%s is age-encrypted, and an age file does not record its recipients (its header holds only wrapped keys): pass them with --encrypt-to age1… (age-keygen -y IDENTITY_FILE prints one)", path)
	case format == FormatPlain:
		return nil, fmt.Errorf("%s is in clear: it has no recipients to take; pass --encrypt-to age1…", path)
	}
	_, metaNode := sopsMetadataNode(doc)
	var meta sopsMeta
	if err := metaNode.Decode(&meta); err != nil {
		return nil, &DecryptError{Path: path, Format: FormatSOPS, Reason: fmt.Sprintf("its sops metadata (line %d) does not decode: restore the file from Git, or re-encrypt it with sops", metaNode.Line)}
	}
	keys, err := meta.ageKeys()
	if err != nil {
		return nil, &DecryptError{Path: path, Format: FormatSOPS, Reason: err.Error()}
	}
	out := make([]string, 0, len(keys))
	for _, k := range keys {
		out = append(out, strings.TrimSpace(k.Recipient))
	}
	return out, nil
}

// readProblem is why inventory.ReadFile failed, without the path it names
// already.
func readProblem(err error) string {
	var pe *fs.PathError
	var fe *inventory.FileError
	switch {
	case errors.As(err, &pe):
		return pe.Err.Error()
	case errors.As(err, &fe):
		return fe.Reason
	}
	return err.Error()
}

// parseAgeIdentities reads identities one a line (perLine, as in a keys
// file) or separated by any white space (as sops reads SOPS_AGE_KEY). Errors
// give the source and line, never the line itself.
func parseAgeIdentities(source string, data []byte, perLine bool) ([]age.Identity, error) {
	trimmed := bytes.TrimSpace(data)
	if bytes.HasPrefix(trimmed, []byte(ageBinaryHeader)) || bytes.HasPrefix(trimmed, []byte(armor.Header)) {
		return nil, fmt.Errorf("%s is a passphrase-protected identity file, which devata cannot open without a prompt: use an unprotected identity file of mode 0600 (age-keygen -o FILE)", source)
	}
	if perLine && bytes.HasPrefix(trimmed, []byte("-----BEGIN")) {
		// a file that is one PEM block: an SSH private key (the age CLI's -i)
		return parseSSHIdentity(source, trimmed)
	}
	var ids []age.Identity
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words := []string{line}
		if !perLine {
			words = strings.Fields(line)
		}
		for _, w := range words {
			id, err := parseAgeIdentity(w)
			if err != nil {
				return nil, fmt.Errorf("%s line %d %s", source, n+1, err)
			}
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%s holds no age identity (AGE-SECRET-KEY-1…): point it at the identity file age-keygen wrote", source)
	}
	return ids, nil
}

func parseAgeIdentity(s string) (age.Identity, error) {
	switch {
	case strings.HasPrefix(s, "AGE-PLUGIN-"):
		return nil, errors.New("is an age plugin identity, which devata does not run: use a native age identity (AGE-SECRET-KEY-1…)")
	case strings.HasPrefix(s, "-----BEGIN"):
		return nil, errors.New("starts an SSH private key among other lines: give the SSH key file alone (--age-identity ~/.ssh/id_ed25519), or a native age identity (AGE-SECRET-KEY-1…)")
	case strings.HasPrefix(s, "ssh-"):
		return nil, errors.New("is an SSH public key, a recipient: give the private key file (--age-identity ~/.ssh/id_ed25519, not FILE.pub)")
	}
	ids, err := age.ParseIdentities(strings.NewReader(s))
	if err != nil || len(ids) != 1 {
		// age's errors do not quote the key, but bech32's may hint at it: keep none
		return nil, errors.New("is not an age identity (AGE-SECRET-KEY-1… or AGE-SECRET-KEY-PQ-1…): fix or remove that line")
	}
	return ids[0], nil
}

// maxBundleDepth bounds how deep a bundle's YAML may nest: a secrets
// bundle is four levels deep, and walking a file nested thousands deep
// (sops' MAC, the decoder) costs memory quadratic in its depth.
const maxBundleDepth = 32

// detectFormat says what data is: an age file, a sops YAML document, or
// clear text, and for sops the document parsed. A file of more than one
// YAML document is refused: sops writes one, and reading only the first
// would take a clear-text document put before a sops one as the bundle
// (sops itself refuses such a file: "metadata not found"). So is one
// nested deeper than any bundle, before anything walks it.
func detectFormat(data []byte) (format string, doc *yaml.Node, err error) {
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if bytes.HasPrefix(data, []byte(ageBinaryHeader)) || bytes.HasPrefix(trimmed, []byte(armor.Header)) {
		return FormatAge, nil, nil
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return FormatPlain, nil, nil // the clear-text decoder reports the line
		}
		docs = append(docs, &n)
	}
	if len(docs) > 1 {
		return FormatPlain, nil, fmt.Errorf("it holds %d YAML documents, where a secrets bundle (in clear or sops) is one: keep only the bundle", len(docs))
	}
	if len(docs) == 0 {
		return FormatPlain, nil, nil
	}
	if d := yamlDepth(docs[0], maxBundleDepth); d > maxBundleDepth {
		return FormatPlain, nil, fmt.Errorf("it nests more than %d levels deep, where a secrets bundle nests four: it is not a bundle", maxBundleDepth)
	}
	if _, meta := sopsMetadataNode(docs[0]); meta != nil {
		return FormatSOPS, docs[0], nil
	}
	return FormatPlain, nil, nil
}

// yamlDepth is how deep n nests, counted up to one past limit; an
// explicit stack, so that no file can exhaust the goroutine's.
func yamlDepth(n *yaml.Node, limit int) int {
	type item struct {
		n     *yaml.Node
		depth int
	}
	deepest := 0
	stack := []item{{n, 0}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		deepest = max(deepest, it.depth)
		if deepest > limit {
			return deepest
		}
		for _, c := range it.n.Content {
			stack = append(stack, item{c, it.depth + 1})
		}
	}
	return deepest
}

// decryptAge opens an age file (binary or armored) in memory.
func decryptAge(path string, data []byte, a AgeIdentities) ([]byte, error) {
	fail := func(noID bool, reason string) error {
		return &DecryptError{Path: path, Format: FormatAge, Reason: reason, NoIdentity: noID}
	}
	set, err := a.load()
	if err != nil {
		return nil, fail(true, err.Error())
	}
	if len(set.ids) == 0 {
		return nil, fail(true, "no age identity is set: "+a.nextStep())
	}
	var src io.Reader = bytes.NewReader(data)
	if !bytes.HasPrefix(data, []byte(ageBinaryHeader)) {
		src = armor.NewReader(src)
	}
	r, err := age.Decrypt(src, set.ids...)
	var nomatch *age.NoIdentityMatchError
	switch {
	case errors.As(err, &nomatch):
		return nil, fail(true, "it does not open with the "+set.describe()+": "+a.nextStep())
	case err != nil:
		return nil, fail(false, "its age header does not parse or verify (damaged, truncated or not an age file): restore it from Git or your backup")
	}
	plain, err := io.ReadAll(io.LimitReader(r, inventory.MaxFileSize+1))
	switch {
	case err != nil:
		return nil, fail(false, "its age payload does not verify (damaged or truncated): restore it from Git or your backup")
	case len(plain) > inventory.MaxFileSize:
		return nil, fail(false, fmt.Sprintf("it decrypts to more than the %d MiB devata reads: check it is the bundle you meant", inventory.MaxFileSize>>20))
	}
	return plain, nil
}

// AgeRecipients are the public keys a bundle is encrypted to.
type AgeRecipients []age.Recipient

// ParseAgeRecipients parses age public keys (age1… or age1pq1…) and SSH
// public keys (ssh-ed25519, ssh-rsa: ParseAgeRecipient). Errors say which
// one by position, not by value: a private key passed by mistake must not
// land in a terminal's scroll-back.
func ParseAgeRecipients(values []string) (AgeRecipients, error) {
	var out AgeRecipients
	for i, v := range values {
		r, err := ParseAgeRecipient(v)
		if err != nil {
			return nil, fmt.Errorf("recipient %d %w", i+1, err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("no age recipient given")
	}
	return out, nil
}

// ParseAgeRecipient parses one recipient as the age CLI's -r does: an age
// public key (age1… or age1pq1…), or an SSH public key line (ssh-ed25519
// or ssh-rsa of 2048 bits or more, comment allowed) whose String is the
// key without its comment. Its error is a predicate to put after the
// recipient's name or position ("is not an age public key …"); it never
// quotes v.
func ParseAgeRecipient(v string) (age.Recipient, error) {
	v = strings.TrimSpace(v)
	switch {
	case strings.HasPrefix(strings.ToUpper(v), "AGE-SECRET-KEY-"):
		return nil, errors.New("is an age identity (a private key), not a recipient: pass its public key, which `age-keygen -y IDENTITY_FILE` prints, and keep the identity secret")
	case strings.HasPrefix(v, "-----BEGIN"):
		return nil, errors.New("is a private key (PEM), not a recipient: pass its public key (FILE.pub, or what `ssh-keygen -y -f FILE` prints), and keep the private key secret")
	case strings.HasPrefix(v, "ssh-"), strings.HasPrefix(v, "ecdsa-"), strings.HasPrefix(v, "sk-"), strings.ContainsAny(v, " \t"):
		// an OpenSSH public key line (age keys hold no white space)
		return parseSSHRecipient(v)
	}
	rs, err := age.ParseRecipients(strings.NewReader(v))
	if err != nil || len(rs) != 1 {
		return nil, errors.New("is not an age public key (age1… or age1pq1…) or an SSH public key (ssh-ed25519 or ssh-rsa): `age-keygen -y IDENTITY_FILE` prints yours")
	}
	return rs[0], nil
}

// EncryptSecrets encodes a bundle as talosctl does and encrypts it to every
// recipient as an ASCII-armored age file: text diffs and merges better in
// Git than binary, and `age -d` reads it as it is.
func EncryptSecrets(b *secrets.Bundle, to AgeRecipients) ([]byte, error) {
	plain, err := MarshalSecrets(b)
	if err != nil {
		return nil, fmt.Errorf("encode secrets bundle: %w", err)
	}
	defer clear(plain)
	var out bytes.Buffer
	aw := armor.NewWriter(&out)
	w, err := age.Encrypt(aw, to...)
	if err != nil {
		return nil, fmt.Errorf("age-encrypt the bundle: %w (post-quantum age1pq1… and classic age1… recipients cannot be mixed in one file)", err)
	}
	if _, err := w.Write(plain); err != nil {
		return nil, fmt.Errorf("age-encrypt the bundle: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("age-encrypt the bundle: %w", err)
	}
	if err := aw.Close(); err != nil {
		return nil, fmt.Errorf("age-encrypt the bundle: %w", err)
	}
	return out.Bytes(), nil
}

// WriteSecretsEncrypted writes the bundle age-encrypted (armored) to the
// recipients, mode 0600, with WriteSecretFile's rules; the clear text never
// reaches the disk.
func WriteSecretsEncrypted(path string, b *secrets.Bundle, to AgeRecipients, force bool) error {
	data, err := EncryptSecrets(b, to)
	if err != nil {
		return err
	}
	return WriteSecretFile(path, data, force)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
