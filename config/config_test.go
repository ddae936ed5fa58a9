package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"devata.dev/devata/config"
)

func flags(t *testing.T, args ...string) *pflag.FlagSet {
	t.Helper()
	fs := pflag.NewFlagSet("devata", pflag.ContinueOnError)
	config.RegisterFlags(fs)
	config.AddOutputFlag(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return fs
}

func envOf(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "devata.yaml", `
inventory: fleet.yaml
concurrency: 8
timeout: 10s
log-format: json
talosconfig: /abs/talosconfig
dial:
  cp-1: 127.0.0.1:50001
  worker-1: 127.0.0.1:50002
`)
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, s config.Settings)
	}{
		{"file", []string{"--config", file}, nil, func(t *testing.T, s config.Settings) {
			eq(t, "inventory (relative to the file)", s.Inventory, filepath.Join(dir, "fleet.yaml"))
			eq(t, "concurrency", s.Concurrency, 8)
			eq(t, "timeout", s.Timeout, 10*time.Second)
			eq(t, "log-format", s.LogFormat, "json")
			eq(t, "talosconfig", s.Talosconfig, "/abs/talosconfig")
			eq(t, "dial cp-1", s.Dial["cp-1"], "127.0.0.1:50001")
			eq(t, "dial entries", len(s.Dial), 2)
			eq(t, "file", s.File, file)
		}},
		{"env over file", []string{"--config", file}, map[string]string{"DEVATA_CONCURRENCY": "4", "TALOSCONFIG": "/env/talosconfig", "DEVATA_INVENTORY": "env.yaml"}, func(t *testing.T, s config.Settings) {
			eq(t, "concurrency", s.Concurrency, 4)
			eq(t, "talosconfig", s.Talosconfig, "/env/talosconfig")
			eq(t, "inventory (env is not file-relative)", s.Inventory, "env.yaml")
			eq(t, "timeout still from file", s.Timeout, 10*time.Second)
		}},
		{"flags over env", []string{"--config", file, "--concurrency", "2", "-i", "flag.yaml", "-o", "json", "-vv"}, map[string]string{"DEVATA_CONCURRENCY": "4"}, func(t *testing.T, s config.Settings) {
			eq(t, "concurrency", s.Concurrency, 2)
			eq(t, "inventory", s.Inventory, "flag.yaml")
			eq(t, "output", s.Output, "json")
			eq(t, "verbose", s.Verbose, 2)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := tt.env
			if env == nil {
				env = map[string]string{}
			}
			s, err := config.Load(flags(t, tt.args...), envOf(env))
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, s)
		})
	}
}

func TestOutputFlagOfOtherMeaningIsNotTheOutputSetting(t *testing.T) {
	fs := pflag.NewFlagSet("gen", pflag.ContinueOnError)
	config.RegisterFlags(fs)
	fs.StringP("output", "o", ".", "a directory")
	if err := fs.Parse([]string{"-o", "/tmp/out"}); err != nil {
		t.Fatal(err)
	}
	s, err := config.Load(fs, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "output", s.Output, config.DefaultOutput)
}

func TestExplicitSettingsFileMustExist(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.yaml")
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{{[]string{"--config", missing}, nil}, {nil, map[string]string{"DEVATA_CONFIG": missing}}} {
		if _, err := config.Load(flags(t, c.args...), envOf(c.env)); err == nil || !strings.Contains(err.Error(), missing) {
			t.Errorf("settings file named but missing: error %v, want one naming it", err)
		}
	}
}

func TestDefaultsWithoutAnySettingsFile(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no devata/config.yaml there
	s, err := config.Load(flags(t), envOf(map[string]string{"DEVATA_KUBECONFIG": "/a", "KUBECONFIG": "/b"}))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "inventory", s.Inventory, config.DefaultInventory)
	eq(t, "concurrency", s.Concurrency, config.DefaultConcurrency)
	eq(t, "timeout", s.Timeout, config.DefaultTimeout)
	eq(t, "output", s.Output, "table")
	eq(t, "kubeconfig: DEVATA_ first", s.Kubeconfig, "/a")
	eq(t, "file", s.File, "")
}

func TestUserConfigDirFileIsRead(t *testing.T) {
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	if err := os.MkdirAll(filepath.Join(home, "devata"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, "devata"), "config.yaml", "concurrency: 3\n")
	s, err := config.Load(flags(t), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "concurrency", s.Concurrency, 3)
}

func TestInvalidSettings(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name, file string
		args       []string
		env        map[string]string
		want       string
	}{
		{"unknown key", "concurency: 3\n", nil, nil, `unknown setting "concurency"`},
		{"bad yaml", "concurrency: [\n", nil, nil, "devata.yaml"},
		{"zero concurrency", "", []string{"--concurrency", "0"}, nil, "concurrency must be at least 1"},
		{"bad output", "output: xml\n", nil, nil, `output must be one of table, json, yaml, junit, prom, html, got "xml"`},
		{"bad env duration", "", nil, map[string]string{"DEVATA_TIMEOUT": "soon"}, "timeout"},
		{"bad dial", "dial: {cp-1: nowhere}\n", nil, nil, `dial.cp-1: "nowhere" is not host:port`},
		{"s3 secret key", "s3: {secret-access-key: x}\n", nil, nil, `unknown setting "s3.secret-access-key"`},
		{"s3 endpoint not a URL", "s3: {endpoint: minio:9000}\n", nil, nil, `s3.endpoint: "minio:9000" is not a URL`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeFile(t, dir, "devata.yaml", tt.file)
			_, err := config.Load(flags(t, append([]string{"--config", file}, tt.args...)...), envOf(tt.env))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func eq[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}

// A kubeconfig list in the settings file (KUBECONFIG's form) has each
// relative path resolved against the file, as a single path is.
func TestKubeconfigListInSettingsFile(t *testing.T) {
	dir := t.TempDir()
	list := func(paths ...string) string { return strings.Join(paths, string(filepath.ListSeparator)) }
	file := writeFile(t, dir, "devata.yaml", "kubeconfig: "+list("/abs/a.yaml", "kube/b.yaml")+"\n")
	s, err := config.Load(flags(t, "--config", file), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "kubeconfig", s.Kubeconfig, list("/abs/a.yaml", filepath.Join(dir, "kube/b.yaml")))
	s, err = config.Load(flags(t, "--config", file), envOf(map[string]string{"KUBECONFIG": list("a", "b")}))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "KUBECONFIG, as given", s.Kubeconfig, list("a", "b"))
}

// CheckFlags judges the flags alone: a bad value typed on the command line
// is the caller's usage error, one from the environment or file is not.
func TestCheckFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{nil, ""},
		{[]string{"--concurrency", "8", "-o", "json", "--log-format", "json", "--timeout", "5s"}, ""},
		{[]string{"--concurrency", "0"}, "concurrency must be at least 1"},
		{[]string{"--timeout", "0s"}, "timeout must be positive"},
		{[]string{"-o", "xml"}, `output must be one of table, json, yaml, junit, prom, html, got "xml"`},
		{[]string{"--log-format", "xml"}, "log-format must be text or json"},
	} {
		err := config.CheckFlags(flags(t, tt.args...))
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%v: error %v, want %q", tt.args, err, tt.want)
		}
	}
	// -o of another meaning (a directory) is not judged
	fs := pflag.NewFlagSet("gen", pflag.ContinueOnError)
	config.RegisterFlags(fs)
	fs.StringP("output", "o", ".", "a directory")
	if err := fs.Parse([]string{"-o", "/tmp/out"}); err != nil {
		t.Fatal(err)
	}
	if err := config.CheckFlags(fs); err != nil {
		t.Errorf("-o DIR: %v", err)
	}
}

// talosctl's --context and -e, from a flag, DEVATA_* or the settings file,
// in that order; -e takes a comma-separated list or repeats.
func TestContextAndEndpoints(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "devata.yaml", "context: from-file\nendpoints: [10.0.0.1, 10.0.0.2]\n")
	tests := []struct {
		name      string
		args      []string
		env       map[string]string
		context   string
		endpoints []string
	}{
		{"file", []string{"--config", file}, nil, "from-file", []string{"10.0.0.1", "10.0.0.2"}},
		{"env over file", []string{"--config", file}, map[string]string{"DEVATA_CONTEXT": "from-env", "DEVATA_ENDPOINTS": "10.0.1.1,10.0.1.2"}, "from-env", []string{"10.0.1.1", "10.0.1.2"}},
		{"flags over env", []string{"--config", file, "--context", "from-flag", "-e", "10.0.2.1", "-e", "10.0.2.2:50000"}, map[string]string{"DEVATA_CONTEXT": "from-env", "DEVATA_ENDPOINTS": "10.0.1.1"}, "from-flag", []string{"10.0.2.1", "10.0.2.2:50000"}},
		{"comma list flag", []string{"--config", file, "--endpoints", "a.example,b.example"}, nil, "from-file", []string{"a.example", "b.example"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := config.Load(flags(t, tt.args...), envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "context", s.Context, tt.context)
			eq(t, "endpoints", strings.Join(s.Endpoints, " "), strings.Join(tt.endpoints, " "))
		})
	}
	if _, err := config.Load(flags(t, "-e", "bad host"), envOf(nil)); err == nil || !strings.Contains(err.Error(), `endpoints: "bad host"`) {
		t.Errorf("an endpoint with a space: %v", err)
	}
}

// --age-identity repeats; DEVATA_AGE_IDENTITY is a path list (as PATH and
// KUBECONFIG, so a comma may be in a name); the settings file takes a path
// or a list, relative to itself; flags over env over file.
func TestAgeIdentity(t *testing.T) {
	dir := t.TempDir()
	list := func(paths ...string) string { return strings.Join(paths, string(filepath.ListSeparator)) }
	one := writeFile(t, dir, "one.yaml", "age-identity: keys/age.txt\n")
	many := writeFile(t, dir, "many.yaml", "age-identity:\n  - /abs/a.txt\n  - b,c.txt\n")
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string
	}{
		{"unset", nil, nil, nil},
		{"file, one path", []string{"--config", one}, nil, []string{filepath.Join(dir, "keys/age.txt")}},
		{"file, a list", []string{"--config", many}, nil, []string{"/abs/a.txt", filepath.Join(dir, "b,c.txt")}},
		{"env over file", []string{"--config", many}, map[string]string{"DEVATA_AGE_IDENTITY": list("x,1.txt", "/y.txt")}, []string{"x,1.txt", "/y.txt"}},
		{"flags over env", []string{"--config", many, "--age-identity", "f,1.txt", "--age-identity", "g.txt"}, map[string]string{"DEVATA_AGE_IDENTITY": "/y.txt"}, []string{"f,1.txt", "g.txt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := config.Load(flags(t, tt.args...), envOf(tt.env))
			if err != nil {
				t.Fatal(err)
			}
			eq(t, "age-identity", strings.Join(s.AgeIdentity, " | "), strings.Join(tt.want, " | "))
			eq(t, "count", len(s.AgeIdentity), len(tt.want))
		})
	}
	for _, bad := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"empty flag", []string{"--age-identity", ""}, nil, "age-identity: an empty path is not an identity file"},
		{"empty list entry", nil, map[string]string{"DEVATA_AGE_IDENTITY": list("a.txt", "")}, "age-identity: an empty path is not an identity file"},
		{"not a path", []string{"--config", writeFile(t, dir, "num.yaml", "age-identity: [7]\n")}, nil, "age-identity [0] is int, not a path"},
	} {
		if _, err := config.Load(flags(t, bad.args...), envOf(bad.env)); err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%s: error %v, want %q", bad.name, err, bad.want)
		}
	}
}

// allow-shared-age-identity comes from the flag, DEVATA_ALLOW_SHARED_AGE_IDENTITY
// (deploy/ sets it for its group-readable Secret) or the settings file.
func TestAllowSharedAgeIdentity(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"--allow-shared-age-identity"}, nil, true},
		{nil, map[string]string{"DEVATA_ALLOW_SHARED_AGE_IDENTITY": "true"}, true},
	} {
		s, err := config.Load(flags(t, c.args...), envOf(c.env))
		if err != nil || s.AllowSharedAgeIdentity != c.want {
			t.Errorf("%v %v: %t, %v; want %t", c.args, c.env, s.AllowSharedAgeIdentity, err, c.want)
		}
	}
}

// The s3 section of the settings file fills backup destinations' options;
// without it they are empty (the URL and the AWS environment decide).
func TestS3Settings(t *testing.T) {
	dir := t.TempDir()
	file := writeFile(t, dir, "devata.yaml", "s3:\n  region: eu-central-1\n  endpoint: https://minio.example:9000\n  profile: backups\n  path-style: true\n")
	s, err := config.Load(flags(t, "--config", file), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	eq(t, "s3.region", s.S3.Region, "eu-central-1")
	eq(t, "s3.endpoint", s.S3.Endpoint, "https://minio.example:9000")
	eq(t, "s3.profile", s.S3.Profile, "backups")
	if s.S3.PathStyle == nil || !*s.S3.PathStyle {
		t.Errorf("s3.path-style = %v, want true", s.S3.PathStyle)
	}
	file = writeFile(t, dir, "devata.yaml", "timeout: 5s\n")
	s, err = config.Load(flags(t, "--config", file), envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	if s.S3 != (config.S3{}) {
		t.Errorf("without an s3 section, S3 = %+v, want it empty", s.S3)
	}
}

// backup.encrypt-to: one recipient or a list in the settings file, a list
// in DEVATA_BACKUP_ENCRYPT_TO that wins over the file, each naming where
// it came from; an unknown key under backup is refused naming the file.
func TestBackupEncryptTo(t *testing.T) {
	const a, b = "age1ql3z7hjy54pw3hyww5ayyfg7zqgvc7w3j2elw8zmrj2kg5sfn9aqmcac8p", "age1lggyhqrw2nlhcxprm67z43rta597azn8gknawjehu9d9dl0jq3yqqvfafg"
	const sshKey = "AAAAC3NzaC1lZDI1NTE5AAAAIEX2tA9y9C7Bv1tO3GiX8Yq3mM0QeX1Qd9Jm3yP5h1sd" // the settings only split; render parses
	dir := t.TempDir()
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       []string
		from       string
	}{
		{"one in the file", "backup:\n  encrypt-to: " + a + "\n", nil, []string{a}, "backup.encrypt-to in the settings file "},
		{"a list in the file", "backup:\n  encrypt-to: [" + a + ", " + b + "]\n", nil, []string{a, b}, "backup.encrypt-to in the settings file "},
		{"the environment over the file", "backup:\n  encrypt-to: [" + a + "]\n", map[string]string{config.EnvBackupEncryptTo: b + ", " + a + "\n"}, []string{b, a}, config.EnvBackupEncryptTo},
		{"neither", "timeout: 5s\n", nil, nil, ""},
		// an SSH key line keeps its spaces and comment; age keys around it
		// still split at white space
		{"SSH keys in the environment", "", map[string]string{config.EnvBackupEncryptTo: a + " " + b + ",ssh-ed25519 " + sshKey + " me@host\nssh-rsa " + sshKey + "\n"}, []string{a, b, "ssh-ed25519 " + sshKey + " me@host", "ssh-rsa " + sshKey}, config.EnvBackupEncryptTo},
		{"an SSH key in the file", "backup:\n  encrypt-to: [ssh-ed25519 " + sshKey + " me@host, " + a + "]\n", nil, []string{"ssh-ed25519 " + sshKey + " me@host", a}, "backup.encrypt-to in the settings file "},
	} {
		file := writeFile(t, dir, "devata.yaml", tc.file)
		s, err := config.Load(flags(t, "--config", file), envOf(tc.env))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if strings.Join(s.Backup.EncryptTo, " ") != strings.Join(tc.want, " ") || !strings.HasPrefix(s.Backup.EncryptToFrom, tc.from) || (tc.from == "") != (s.Backup.EncryptToFrom == "") {
			t.Errorf("%s: encrypt-to %q from %q, want %q from %q…", tc.name, s.Backup.EncryptTo, s.Backup.EncryptToFrom, tc.want, tc.from)
		}
	}
	file := writeFile(t, dir, "devata.yaml", "backup:\n  recipients: ["+a+"]\n")
	_, err := config.Load(flags(t, "--config", file), envOf(nil))
	if err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), `"backup.recipients"`) || !strings.Contains(err.Error(), "encrypt-to") {
		t.Errorf("an unknown backup key: %v, want it named with the file and the known key", err)
	}
}
