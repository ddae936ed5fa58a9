package image

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// Package is the import path of the devata command.
const Package = "devata.dev/devata/cmd/devata"

// versionRE is what a version may be: it goes into -ldflags and into the
// image tag, so it is a valid tag (no '+', no spaces).
var versionRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// CheckVersion says whether v can be stamped and used as a tag.
func CheckVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("image: version %q is not a valid image tag (letters, digits, '_', '.', '-'; at most 128): set -version", v)
	}
	return nil
}

// BuildBinary builds devata for linux/arch into out as a static binary:
// CGO_ENABLED=0, -trimpath, no VCS stamp (the revision is an image label),
// stripped, with main.version set to version as `devata version` prints it.
// dir is a directory inside the devata module ("" for the current one).
// The go command's output goes to stderr.
func BuildBinary(ctx context.Context, dir, out, arch, version string, stderr io.Writer) error {
	if err := CheckVersion(version); err != nil {
		return err
	}
	args := []string{
		"build", "-trimpath", "-buildvcs=false", "-mod=readonly",
		"-ldflags=-s -w -X main.version=" + version,
		"-o", out, Package,
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout = stderr
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("image: go build %s for linux/%s: %w (the go command's output is above)", Package, arch, err)
	}
	return nil
}

// GoZoneinfo reads the zoneinfo.zip of the Go toolchain that builds the
// binary (GOROOT/lib/time/zoneinfo.zip): about 400 KiB, and the time package
// reads it through ZONEINFO when TZ names a zone.
func GoZoneinfo(ctx context.Context) ([]byte, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "go", "env", "GOROOT")
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("image: go env GOROOT: %w", err)
	}
	path := filepath.Join(strings.TrimSpace(out.String()), "lib", "time", "zoneinfo.zip")
	b, err := readBounded(path, maxSmall)
	if err != nil {
		return nil, fmt.Errorf("image: zoneinfo: %w (or build with -zoneinfo=false)", err)
	}
	return b, nil
}
