package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
)

// The pinned versions. Changing one means changing the wrapper module under
// build/ as well; the cache directory name carries both, so a bump never
// reuses old binaries.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.6.6"
)

// DirEnv names the environment variable that overrides the cache directory.
const DirEnv = "DEVATA_TESTBIN_DIR"

// binary describes one program built from a wrapper module under build/.
type binary struct {
	name     string // file name in the cache directory
	module   string // wrapper module directory under build/
	pkg      string // main package to build
	version  string
	estimate string // shown while building, so a long wait is not a surprise
	ldflags  []string
	testTags string // set: a test binary of pkg (go test -c) with these build tags
}

var binaries = []binary{
	{
		name:     "etcd",
		module:   "etcd",
		pkg:      "go.etcd.io/etcd/server/v3",
		version:  EtcdVersion,
		estimate: "about 1 minute",
	},
	{
		name:     "kube-apiserver",
		module:   "kube-apiserver",
		pkg:      "k8s.io/kubernetes/cmd/kube-apiserver",
		version:  KubernetesVersion,
		estimate: "about 5 minutes",
		// A module build leaves the version at v0.0.0-master; the API
		// server reports gitVersion, and clients read it back.
		ldflags: kubeVersionFlags(KubernetesVersion),
	},
	versitygwBinary,    // the S3 server (s3.go)
	nodeExporterBinary, // the textfile scraper (nodeexporter.go)
}

func kubeVersionFlags(v string) []string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(v, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	var flags []string
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		flags = append(flags,
			"-X", pkg+".gitVersion="+v,
			"-X", pkg+".gitMajor="+major,
			"-X", pkg+".gitMinor="+minor,
		)
	}
	return flags
}

// DefaultDir returns the cache directory for the pinned binaries:
// $DEVATA_TESTBIN_DIR, else the user cache directory.
func DefaultDir() (string, error) {
	if dir := os.Getenv(DirEnv); dir != "" {
		return filepath.Abs(dir)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("testbin dir: set %s: %w", DirEnv, err)
	}
	return filepath.Join(cache, "devata", "testbin", "k8s-"+KubernetesVersion+"-etcd-"+EtcdVersion), nil
}

// BinDir returns the cache directory, building the binaries into it first if
// any is missing. Concurrent callers, in this or other processes, share one
// build. Progress goes to stderr.
func BinDir(ctx context.Context) (string, error) {
	dir, err := DefaultDir()
	if err != nil {
		return "", err
	}
	if err := Install(ctx, dir, os.Stderr); err != nil {
		return "", err
	}
	return dir, nil
}

// Install builds every missing binary into dir with the go command, from the
// wrapper modules next to this package's source. It holds an exclusive lock
// on dir/.lock while it builds, and installs each binary by renaming it into
// place, so a reader never sees a half-written file. Progress lines go to
// progress.
func Install(ctx context.Context, dir string, progress io.Writer) error {
	if complete(dir) {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("testbin: %w", err)
	}
	unlock, err := lock(ctx, filepath.Join(dir, ".lock"), progress)
	if err != nil {
		return err
	}
	defer unlock()

	// Whatever is left in a build directory now belongs to a build that
	// died: we hold the lock.
	stale, _ := filepath.Glob(filepath.Join(dir, ".build-*"))
	for _, s := range stale {
		os.RemoveAll(s)
	}

	var src string
	for _, b := range binaries {
		if isExecutable(filepath.Join(dir, b.name)) {
			continue // another process built it while we waited
		}
		if src == "" {
			if src, err = sourceDir(); err != nil {
				return err
			}
		}
		if err := build(ctx, src, dir, b, progress); err != nil {
			return err
		}
	}
	return nil
}

func complete(dir string) bool {
	for _, b := range binaries {
		if !isExecutable(filepath.Join(dir, b.name)) {
			return false
		}
	}
	return true
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// lock takes an exclusive flock on path, polling so that ctx can cancel the
// wait and so that the wait is announced once.
func lock(ctx context.Context, path string, progress io.Writer) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("testbin lock: %w", err)
	}
	announced := false
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN) // closing the file releases it too
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("testbin lock %s: %w", path, err)
		}
		if !announced {
			fmt.Fprintf(progress, "waiting for another process building test binaries (lock %s)…\n", path)
			announced = true
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("testbin lock %s: %w", path, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// sourceDir finds build/ next to this file. The source tree is there whenever
// tests run; a binary built with -trimpath falls back to the enclosing module
// of the working directory.
func sourceDir() (string, error) {
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "build")
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if gomod := strings.TrimSpace(string(out)); err == nil && gomod != "" && gomod != os.DevNull {
		dir := filepath.Join(filepath.Dir(gomod), "internal", "testenv", "build")
		if _, err := os.Stat(dir); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("testbin: cannot find internal/testenv/build: run from the devata source tree")
}

func build(ctx context.Context, src, dir string, b binary, progress io.Writer) error {
	tmp, err := os.MkdirTemp(dir, ".build-"+b.name+"-")
	if err != nil {
		return fmt.Errorf("build %s: %w", b.name, err)
	}
	defer os.RemoveAll(tmp)

	fmt.Fprintf(progress, "building %s %s (%s, once) into %s…\n", b.name, b.version, b.estimate, dir)
	start := time.Now()

	args := []string{"build", "-mod=readonly", "-o", filepath.Join(tmp, b.name)}
	if b.testTags != "" {
		args = []string{"test", "-c", "-mod=readonly", "-tags", b.testTags, "-o", filepath.Join(tmp, b.name)}
	}
	if len(b.ldflags) > 0 {
		args = append(args, "-ldflags="+strings.Join(b.ldflags, " "))
	}
	args = append(args, b.pkg)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = filepath.Join(src, b.module)
	// Static binaries need no C toolchain; GOWORK=off keeps a go.work
	// above the tree from swallowing the wrapper module.
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	cmd.Stdout = progress
	cmd.Stderr = progress
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("build %s %s in %s: %w", b.name, b.version, cmd.Dir, err)
	}
	if err := os.Rename(filepath.Join(tmp, b.name), filepath.Join(dir, b.name)); err != nil {
		return fmt.Errorf("install %s: %w", b.name, err)
	}
	fmt.Fprintf(progress, "built %s %s in %s\n", b.name, b.version, time.Since(start).Round(time.Second))
	return nil
}

// TalosctlVersion is the talosctl the sim is checked against first, the one
// Talosctl returns.
const TalosctlVersion = "v1.11.0"

// TalosctlVersions are the releases of the real talosctl the talosctl tests
// run against the sim, each built from a wrapper module of its own under
// build/ (talosctl for v1.11.0, talosctl-<version> for the others) that
// copies the replace directives of that release's go.mod, with served
// versions in place of the pins the Go module proxy does not serve (see
// each go.mod).
var TalosctlVersions = []string{TalosctlVersion, "v1.13.9", "v1.14.1"}

// talosctlBinary is the build of one talosctl release. v1.11.0 keeps the
// file name talosctl it has always had in the cache.
func talosctlBinary(version string) (binary, error) {
	if !slices.Contains(TalosctlVersions, version) {
		return binary{}, fmt.Errorf("testbin: no wrapper module for talosctl %s (have %s)", version, strings.Join(TalosctlVersions, ", "))
	}
	b := binary{
		name:     "talosctl",
		module:   "talosctl",
		pkg:      "github.com/siderolabs/talos/cmd/talosctl",
		version:  version,
		estimate: "about 4-8 minutes",
	}
	if version != TalosctlVersion {
		b.name += "-" + version
		b.module += "-" + version
		b.estimate = "about 10-15 minutes on 2 cores"
	}
	return b, nil
}

// Talosctl returns the path of the real talosctl v1.11.0, building it from
// the Go module proxy into the cache directory first if needed (locked, once).
// Only the talosctl tests (build tag talosctl) use it.
func Talosctl(ctx context.Context, progress io.Writer) (string, error) {
	return TalosctlAt(ctx, TalosctlVersion, progress)
}

// TalosctlAt returns the path of the real talosctl of version, one of
// TalosctlVersions, building it as Talosctl does.
func TalosctlAt(ctx context.Context, version string, progress io.Writer) (string, error) {
	b, err := talosctlBinary(version)
	if err != nil {
		return "", err
	}
	return buildOnce(ctx, b, progress)
}

// buildOnce returns the path of b in the cache directory, building it
// there first if it is not yet (under the cache's lock, so that
// concurrent test processes build it once).
func buildOnce(ctx context.Context, b binary, progress io.Writer) (string, error) {
	dir, err := DefaultDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, b.name)
	if isExecutable(path) {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	unlock, err := lock(ctx, filepath.Join(dir, ".lock"), progress)
	if err != nil {
		return "", err
	}
	defer unlock()
	if isExecutable(path) {
		return path, nil
	}
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	return path, build(ctx, src, dir, b, progress)
}
