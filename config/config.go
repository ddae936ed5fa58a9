// Package config resolves devata's own settings: command-line flags over
// DEVATA_* environment variables over a settings file over defaults. Only
// cmd/devata uses it; every other package receives plain values.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode"

	"github.com/go-viper/mapstructure/v2"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
)

// Settings are devata's own settings, as opposed to the inventory (the cluster's spec).
type Settings struct {
	Inventory   string        `mapstructure:"inventory"`
	Talosconfig string        `mapstructure:"talosconfig"`
	Kubeconfig  string        `mapstructure:"kubeconfig"`
	Concurrency int           `mapstructure:"concurrency"`
	Timeout     time.Duration `mapstructure:"timeout"`
	Output      string        `mapstructure:"output"`
	LogFormat   string        `mapstructure:"log-format"`
	Verbose     int           `mapstructure:"verbose"`
	// Context is the talosconfig context to use (talosctl --context); empty
	// means the talosconfig's current one.
	Context string `mapstructure:"context"`
	// Endpoints, when set, carry every call to the machines, each named by
	// node metadata (talosctl -e); empty means the context's endpoints, used
	// only for machines that refuse a direct connection.
	Endpoints []string `mapstructure:"endpoints"`
	// Dial overrides where a machine's Talos API is reached: machine name → host:port.
	// `devata sim` writes these so the inventory's real addresses stay untouched.
	Dial map[string]string `mapstructure:"dial"`
	// Simulated marks the machines as devata's simulated fleet (devata sim sets
	// it in the settings file it writes); every report then says so.
	Simulated bool `mapstructure:"simulated"`
	// AgeIdentity are the age identity files that open an encrypted secrets
	// bundle. When set, they replace sops' SOPS_AGE_KEY, SOPS_AGE_KEY_FILE
	// and keys.txt (bootstrap.AgeIdentities.Files).
	AgeIdentity []string `mapstructure:"age-identity"`
	// AllowSharedAgeIdentity takes identity files that others than their
	// owner may read (a Kubernetes Secret mounted with an fsGroup is
	// group-readable), which are refused otherwise, as ssh refuses such keys.
	AllowSharedAgeIdentity bool `mapstructure:"allow-shared-age-identity"`
	// S3 are the settings of backup destinations on object storage
	// (s3://bucket/prefix/), from the settings file's s3 section only.
	S3 S3 `mapstructure:"s3"`
	// Backup are backup etcd's settings: what a scheduled run (deploy/'s
	// CronJob) would otherwise pass as flags.
	Backup Backup `mapstructure:"backup"`

	// File is the settings file that was read, if any.
	File string `mapstructure:"-"`
}

// S3 are what an s3:// backup destination does not carry (backup/store's
// Options). Each one set here wins over the URL's query (?region=,
// ?endpoint=, ?profile=, ?use_path_style=); each one unset falls back to
// the query, then the AWS SDK's standard environment and shared files
// (AWS_REGION, AWS_ENDPOINT_URL_S3, AWS_PROFILE, ~/.aws/config), as the aws
// CLI reads them. Credentials are never a setting: they come from the AWS
// environment or shared credentials file alone.
type S3 struct {
	Region   string `mapstructure:"region"`
	Endpoint string `mapstructure:"endpoint"`
	Profile  string `mapstructure:"profile"`
	// PathStyle addresses buckets as ENDPOINT/BUCKET; nil: path style
	// when the endpoint is an IP address or localhost.
	PathStyle *bool `mapstructure:"path-style"`
}

// Backup are backup etcd's settings, from DEVATA_BACKUP_ENCRYPT_TO or the
// settings file's backup section; backup etcd's flags replace them.
type Backup struct {
	// EncryptTo are the recipients (age1…, or SSH public keys ssh-ed25519
	// and ssh-rsa) backup etcd encrypts to when --encrypt-to is not given:
	// the settings file's backup.encrypt-to (one or a list), or
	// DEVATA_BACKUP_ENCRYPT_TO (SplitRecipients). Public keys only:
	// nothing here is a secret.
	EncryptTo []string `mapstructure:"encrypt-to"`
	// EncryptToFrom names where EncryptTo came from, for its errors.
	EncryptToFrom string `mapstructure:"-"`
}

// EnvBackupEncryptTo is the backup.encrypt-to setting's variable.
const EnvBackupEncryptTo = "DEVATA_BACKUP_ENCRYPT_TO"

// SplitRecipients splits DEVATA_BACKUP_ENCRYPT_TO into recipients: at
// commas and line ends, and, in a part that is not an SSH key, at white
// space too (age public keys hold neither). A part that starts with ssh-
// is one SSH public key line, spaces and comment included
// ("ssh-ed25519 AAAA… me@host"), so an SSH key takes a comma or a line
// of its own.
func SplitRecipients(s string) []string {
	var out []string
	for _, part := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == '\n' || r == '\r' }) {
		if part = strings.TrimSpace(part); strings.HasPrefix(part, "ssh-") {
			out = append(out, part)
			continue
		}
		out = append(out, strings.FieldsFunc(part, unicode.IsSpace)...)
	}
	return out
}

// Defaults for settings nobody set.
const (
	DefaultInventory   = "inventory.yaml"
	DefaultConcurrency = 32
	DefaultTimeout     = 30 * time.Second
	DefaultOutput      = "table"
	DefaultLogFormat   = "text"
)

// Outputs are the report formats; LogFormats the log encodings.
var (
	Outputs    = []string{"table", "json", "yaml", "junit", "prom", "html"}
	LogFormats = []string{"text", "json"}
)

// env names besides DEVATA_<KEY>, as the tools they belong to spell them.
var extraEnv = map[string]string{"talosconfig": "TALOSCONFIG", "kubeconfig": "KUBECONFIG"}

// pathKeys are resolved against the settings file's directory when they come from it.
var pathKeys = []string{"inventory", "talosconfig", "kubeconfig"}

// RegisterFlags adds the global flags to flags. Their defaults are shown in help
// but only flags the user set take precedence over env and file.
func RegisterFlags(flags *pflag.FlagSet) {
	flags.StringP("inventory", "i", DefaultInventory, "inventory file (env DEVATA_INVENTORY)")
	flags.String("talosconfig", "", "talosctl client config (env TALOSCONFIG; default ~/.talos/config)")
	flags.String("context", "", "talosconfig context to use, as talosctl --context (env DEVATA_CONTEXT; default: the current one)")
	flags.StringSliceP("endpoints", "e", nil, "reach every machine through these Talos API endpoints (control planes: a worker forwards nothing), as talosctl -e (env DEVATA_ENDPOINTS; default: direct, or the context's endpoints for a machine that refuses)")
	flags.String("kubeconfig", "", "kubeconfig for Kubernetes-side checks (env KUBECONFIG; a list a:b is merged as kubectl merges it)")
	flags.Int("concurrency", DefaultConcurrency, "machines worked on at once (env DEVATA_CONCURRENCY)")
	flags.Duration("timeout", DefaultTimeout, "timeout per machine (env DEVATA_TIMEOUT)")
	flags.CountP("verbose", "v", "more log detail; repeat for more (env DEVATA_VERBOSE)")
	flags.String("log-format", DefaultLogFormat, "log encoding on stderr: text or json (env DEVATA_LOG_FORMAT)")
	flags.String("config", "", "devata settings file (env DEVATA_CONFIG; default <user config dir>/devata/config.yaml if present)")
	flags.Bool("allow-shared-age-identity", false, "take age identity files that others than their owner may read (a Kubernetes Secret mounted with an fsGroup is group-readable); refused otherwise, as ssh refuses such keys (env DEVATA_ALLOW_SHARED_AGE_IDENTITY)")
	flags.StringArray("age-identity", nil, "age identity file that opens an encrypted secrets bundle or etcd snapshot (backup etcd --encrypt-to); repeat for several; replaces SOPS_AGE_KEY, SOPS_AGE_KEY_FILE and sops' keys.txt (env DEVATA_AGE_IDENTITY, a list as PATH takes it)")
}

// outputAnnotation marks the -o flag that selects a report format, so that
// commands whose -o names a file or directory do not set the output setting.
const outputAnnotation = "devata.dev/output-format"

// AddOutputFlag adds -o/--output for commands that render a report.
func AddOutputFlag(flags *pflag.FlagSet) {
	flags.StringP("output", "o", DefaultOutput, "report format: "+strings.Join(Outputs, ", ")+" (env DEVATA_OUTPUT)")
	_ = flags.SetAnnotation("output", outputAnnotation, []string{"true"})
}

// Load resolves settings from flags, the environment (getenv) and
// the settings file, in that order of precedence.
func Load(flags *pflag.FlagSet, getenv func(string) string) (Settings, error) {
	v := viper.New()
	v.SetDefault("inventory", DefaultInventory)
	v.SetDefault("concurrency", DefaultConcurrency)
	v.SetDefault("timeout", DefaultTimeout)
	v.SetDefault("output", DefaultOutput)
	v.SetDefault("log-format", DefaultLogFormat)
	v.SetDefault("verbose", 0)
	v.SetDefault("talosconfig", "")
	v.SetDefault("kubeconfig", "")

	envSet := loadEnv(v, getenv)
	file, explicit := settingsFile(flags, getenv)
	fileSettings := viper.New()
	s := Settings{}
	if file != "" {
		found, err := loadFile(v, fileSettings, file, explicit, envSet)
		if err != nil {
			return Settings{}, err
		}
		if found {
			s.File = file
		}
	}
	loadFlags(v, flags)

	if err := v.Unmarshal(&s, func(c *mapstructure.DecoderConfig) {
		c.DecodeHook = mapstructure.ComposeDecodeHookFunc(mapstructure.StringToTimeDurationHookFunc(), mapstructure.StringToSliceHookFunc(","))
		c.WeaklyTypedInput = true
	}); err != nil {
		return Settings{}, fmt.Errorf("settings: %w", err)
	}
	switch {
	case envSet["backup"]:
		s.Backup.EncryptToFrom = EnvBackupEncryptTo
	case len(s.Backup.EncryptTo) > 0:
		s.Backup.EncryptToFrom = "backup.encrypt-to in the settings file " + s.File
	}
	if s.File != "" {
		resolveFilePaths(&s, fileSettings, flags, envSet)
	}
	return s, s.Validate()
}

// loadEnv sets into v what the environment (read through getenv, so that
// tests and callers control it) holds, and says which top-level keys it set.
func loadEnv(v *viper.Viper, getenv func(string) string) map[string]bool {
	envSet := map[string]bool{}
	// a list of paths, as PATH and KUBECONFIG take one (a comma may be in a path)
	if val := getenv(envAgeIdentity); val != "" {
		v.Set("age-identity", filepath.SplitList(val))
		envSet["age-identity"] = true
	}
	// a list of public keys (SplitRecipients)
	if val := SplitRecipients(getenv(EnvBackupEncryptTo)); len(val) > 0 {
		v.Set("backup.encrypt-to", val)
		envSet["backup"] = true
	}
	for _, key := range []string{"inventory", "talosconfig", "kubeconfig", "concurrency", "timeout", "output", "log-format", "verbose", "context", "endpoints", "allow-shared-age-identity"} {
		names := []string{"DEVATA_" + strings.ToUpper(strings.ReplaceAll(key, "-", "_"))}
		if extra, ok := extraEnv[key]; ok {
			names = append(names, extra)
		}
		for _, name := range names {
			if val := getenv(name); val != "" {
				v.Set(key, val) // overridden later by flags the user set
				envSet[key] = true
				break
			}
		}
	}
	return envSet
}

// settingsFile is the settings file to read: --config, else DEVATA_CONFIG
// (both explicit: it must exist), else the user's config directory's.
func settingsFile(flags *pflag.FlagSet, getenv func(string) string) (file string, explicit bool) {
	if flags != nil {
		if f := flags.Lookup("config"); f != nil && f.Changed {
			return f.Value.String(), true
		}
	}
	if env := getenv("DEVATA_CONFIG"); env != "" {
		return env, true
	}
	if dir, err := os.UserConfigDir(); err == nil {
		return filepath.Join(dir, "devata", "config.yaml"), false
	}
	return "", false
}

// loadFile reads the settings file into fileSettings and sets into v each
// key the environment did not set. A missing file that was not asked for
// explicitly is no error: found is false.
func loadFile(v, fileSettings *viper.Viper, file string, explicit bool, envSet map[string]bool) (found bool, err error) {
	fileSettings.SetConfigFile(file)
	fileSettings.SetConfigType("yaml")
	if err := fileSettings.ReadInConfig(); err != nil {
		if explicit || !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("settings file %s: %w (fix or remove it, or point --config elsewhere)", file, err)
		}
		return false, nil
	}
	if err := checkKeys(fileSettings, file); err != nil {
		return false, err
	}
	for _, key := range fileSettings.AllKeys() {
		top, _, _ := strings.Cut(key, ".")
		if !envSet[top] {
			v.Set(key, fileSettings.Get(key))
		}
	}
	if dial := fileSettings.GetStringMapString("dial"); len(dial) > 0 {
		v.Set("dial", dial)
	}
	if fileSettings.IsSet("age-identity") && !envSet["age-identity"] {
		ids, err := pathList(fileSettings.Get("age-identity"))
		if err != nil {
			return false, fmt.Errorf("settings file %s: age-identity %w", file, err)
		}
		v.Set("age-identity", ids)
	}
	return true, nil
}

// loadFlags sets into v each global flag the user set, over the environment
// and the file.
func loadFlags(v *viper.Viper, flags *pflag.FlagSet) {
	if flags == nil {
		return
	}
	for _, key := range []string{"inventory", "talosconfig", "kubeconfig", "concurrency", "timeout", "output", "log-format", "verbose", "context", "endpoints", "age-identity", "allow-shared-age-identity"} {
		f := flags.Lookup(key)
		if f == nil || !f.Changed || key == "output" && f.Annotations[outputAnnotation] == nil {
			continue
		}
		if sv, ok := f.Value.(pflag.SliceValue); ok {
			v.Set(key, sv.GetSlice())
			continue
		}
		v.Set(key, f.Value.String())
	}
}

// resolveFilePaths resolves the relative paths that came from the settings
// file (not the environment, not a flag) against the file's directory.
func resolveFilePaths(s *Settings, fileSettings *viper.Viper, flags *pflag.FlagSet, envSet map[string]bool) {
	fromFlag := func(key string) bool {
		return flags != nil && flags.Lookup(key) != nil && flags.Lookup(key).Changed
	}
	dir := filepath.Dir(s.File)
	for _, key := range pathKeys {
		if fileSettings.IsSet(key) && !envSet[key] && !fromFlag(key) {
			p := fieldPtr(s, key)
			if key == "kubeconfig" {
				*p = resolveList(dir, *p)
			} else if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(dir, *p)
			}
		}
	}
	if fileSettings.IsSet("age-identity") && !envSet["age-identity"] && !fromFlag("age-identity") {
		for i, p := range s.AgeIdentity {
			if p != "" && !filepath.IsAbs(p) {
				s.AgeIdentity[i] = filepath.Join(dir, p)
			}
		}
	}
}

// envAgeIdentity is the age-identity setting's variable.
const envAgeIdentity = "DEVATA_AGE_IDENTITY"

// pathList is a settings-file value that names one path (a string) or
// several (a list of strings).
func pathList(v any) ([]string, error) {
	switch v := v.(type) {
	case string:
		return []string{v}, nil
	case []any:
		out := make([]string, 0, len(v))
		for i, e := range v {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("[%d] is %T, not a path: give a file path or a list of them", i, e)
			}
			out = append(out, str)
		}
		return out, nil
	}
	return nil, fmt.Errorf("is %T: give a file path or a list of them", v)
}

// resolveList resolves each relative path of a path list (kubeconfig, as
// KUBECONFIG takes it: a.yaml:b.yaml) against dir.
func resolveList(dir, list string) string {
	if list == "" {
		return ""
	}
	paths := filepath.SplitList(list)
	for i, p := range paths {
		if p != "" && !filepath.IsAbs(p) {
			paths[i] = filepath.Join(dir, p)
		}
	}
	return strings.Join(paths, string(filepath.ListSeparator))
}

// CheckFlags validates the global settings given as flags on the command
// line, alone: a caller tells a usage error (--concurrency 0, -o nope) from
// a bad environment variable or settings file, which Load reports the same.
func CheckFlags(flags *pflag.FlagSet) error {
	s := Settings{Concurrency: DefaultConcurrency, Timeout: DefaultTimeout, Output: DefaultOutput, LogFormat: DefaultLogFormat}
	changed := func(key string) bool {
		f := flags.Lookup(key)
		return f != nil && f.Changed && (key != "output" || f.Annotations[outputAnnotation] != nil)
	}
	// pflag has parsed them already: a value of the wrong type never gets here
	if changed("concurrency") {
		s.Concurrency, _ = flags.GetInt("concurrency")
	}
	if changed("timeout") {
		s.Timeout, _ = flags.GetDuration("timeout")
	}
	if changed("output") {
		s.Output = flags.Lookup("output").Value.String()
	}
	if changed("log-format") {
		s.LogFormat = flags.Lookup("log-format").Value.String()
	}
	return s.Validate()
}

func fieldPtr(s *Settings, key string) *string {
	switch key {
	case "inventory":
		return &s.Inventory
	case "talosconfig":
		return &s.Talosconfig
	default:
		return &s.Kubeconfig
	}
}

var knownKeys = map[string]bool{"age-identity": true, "inventory": true, "talosconfig": true, "kubeconfig": true, "concurrency": true, "timeout": true, "output": true, "log-format": true, "verbose": true, "context": true, "endpoints": true, "dial": true, "simulated": true, "s3": true, "backup": true}
var knownS3Keys = map[string]bool{"region": true, "endpoint": true, "profile": true, "path-style": true}
var knownBackupKeys = map[string]bool{"encrypt-to": true}

func checkKeys(v *viper.Viper, file string) error {
	var bad []string
	for _, key := range v.AllKeys() {
		top, sub, _ := strings.Cut(key, ".")
		if !knownKeys[top] {
			bad = append(bad, top)
		}
		if top == "s3" && !knownS3Keys[sub] {
			return fmt.Errorf("settings file %s: unknown setting %q (known under s3: region, endpoint, profile, path-style; credentials come from the AWS environment or ~/.aws/credentials, never from this file)", file, key)
		}
		if top == "backup" && !knownBackupKeys[sub] {
			return fmt.Errorf("settings file %s: unknown setting %q (known under backup: encrypt-to, the age recipients backup etcd encrypts to)", file, key)
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("settings file %s: unknown setting %q (known: inventory, talosconfig, kubeconfig, context, endpoints, concurrency, timeout, output, log-format, verbose, dial, simulated, age-identity, s3, backup)", file, bad[0])
	}
	return nil
}

// Validate checks value ranges and enumerations.
func (s Settings) Validate() error {
	var errs []string
	if s.Concurrency < 1 {
		errs = append(errs, fmt.Sprintf("concurrency must be at least 1, got %d", s.Concurrency))
	}
	if s.Timeout <= 0 {
		errs = append(errs, fmt.Sprintf("timeout must be positive, got %s", s.Timeout))
	}
	if !contains(Outputs, s.Output) {
		errs = append(errs, fmt.Sprintf("output must be one of %s, got %q", strings.Join(Outputs, ", "), s.Output))
	}
	if !contains(LogFormats, s.LogFormat) {
		errs = append(errs, fmt.Sprintf("log-format must be text or json, got %q", s.LogFormat))
	}
	for _, ep := range s.Endpoints {
		if strings.TrimSpace(ep) == "" || strings.ContainsAny(ep, " \t/") && !strings.Contains(ep, "://") {
			errs = append(errs, fmt.Sprintf("endpoints: %q is not a host, host:port or URL", ep))
		}
	}
	for _, p := range s.AgeIdentity {
		if strings.TrimSpace(p) == "" {
			errs = append(errs, "age-identity: an empty path is not an identity file")
		}
	}
	for _, r := range s.Backup.EncryptTo {
		if strings.TrimSpace(r) == "" {
			errs = append(errs, "backup.encrypt-to: an empty recipient is no age public key")
		}
	}
	if ep := s.S3.Endpoint; ep != "" && !strings.HasPrefix(ep, "https://") && !strings.HasPrefix(ep, "http://") {
		errs = append(errs, fmt.Sprintf("s3.endpoint: %q is not a URL: give https://HOST[:PORT]", ep))
	}
	for name, addr := range s.Dial {
		if !strings.Contains(addr, ":") {
			errs = append(errs, fmt.Sprintf("dial.%s: %q is not host:port", name, addr))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("settings: %s (set them with flags, DEVATA_* variables or the settings file)", strings.Join(errs, "; "))
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
