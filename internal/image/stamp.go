package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// Stamp is what the build says about the source: the version `devata
// version` prints and the tag carries, the commit, where the source lives
// and the time the image claims, with where each came from.
type Stamp struct {
	Version, Revision, Source string
	Created                   time.Time
	CreatedFrom               string // "SOURCE_DATE_EPOCH" or "commit time"
}

// DefaultSource is the source label when the work tree has no origin
// remote: the Go module path.
const DefaultSource = "devata.dev/devata"

// ReadStamp reads the stamp from the git work tree at dir and the
// environment: version from `git describe --tags --always --dirty` ("dev"
// without git), revision from HEAD ("unknown"), source from the origin
// remote (DefaultSource), created from SOURCE_DATE_EPOCH, else the HEAD
// commit's time; with neither it fails rather than use the clock, which
// would make every build differ.
func ReadStamp(ctx context.Context, dir string) (Stamp, error) {
	s := Stamp{
		Version:  gitOr(ctx, dir, "dev", "describe", "--tags", "--always", "--dirty"),
		Revision: gitOr(ctx, dir, "unknown", "rev-parse", "HEAD"),
		Source:   gitOr(ctx, dir, DefaultSource, "config", "--get", "remote.origin.url"),
	}
	if v, ok := os.LookupEnv("SOURCE_DATE_EPOCH"); ok {
		t, err := parseEpoch(v)
		if err != nil {
			return Stamp{}, fmt.Errorf("image: SOURCE_DATE_EPOCH: %w", err)
		}
		s.Created, s.CreatedFrom = t, "SOURCE_DATE_EPOCH"
		return s, nil
	}
	ct := gitOr(ctx, dir, "", "log", "-1", "--format=%ct")
	if ct == "" {
		return Stamp{}, fmt.Errorf("image: no commit time in %s (not a git work tree?): set SOURCE_DATE_EPOCH to the source's time in seconds since 1970", dirName(dir))
	}
	t, err := parseEpoch(ct)
	if err != nil {
		return Stamp{}, fmt.Errorf("image: git commit time: %w", err)
	}
	s.Created, s.CreatedFrom = t, "commit time"
	return s, nil
}

func parseEpoch(v string) (time.Time, error) {
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return time.Time{}, fmt.Errorf("%q is not a count of seconds since 1970", v)
	}
	return time.Unix(n, 0).UTC(), nil
}

func gitOr(ctx context.Context, dir, fallback string, args ...string) string {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return fallback
	}
	if v := strings.TrimSpace(out.String()); v != "" {
		return v
	}
	return fallback
}

func dirName(dir string) string {
	if dir == "" {
		return "the current directory"
	}
	return dir
}
