package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Fetch copies the object name from s into a new file dir/name (0600,
// created exclusively, never through a symbolic link), streaming with
// bounded memory, and returns the file's path and the size and SHA-256 of
// what was read, for the caller to hold against what a sidecar recorded.
// At most limit bytes are read (limit <= 0: no limit): an object longer
// than that is refused, not cut. A failed or interrupted fetch removes the
// file, so nothing partial is left for a caller to use. dir should be
// private (os.MkdirTemp's 0700): what a snapshot holds is every Secret.
func Fetch(ctx context.Context, s Store, name, dir string, limit int64) (string, Written, error) {
	if err := checkName(s, name); err != nil {
		return "", Written{}, err
	}
	rc, err := s.Get(ctx, name)
	if err != nil {
		return "", Written{}, err
	}
	defer rc.Close()
	path := filepath.Join(dir, name)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return "", Written{}, fmt.Errorf("fetch %s from %s: %w; give a private directory with room for it (TMPDIR)", name, s, err)
	}
	fail := func(err error) (string, Written, error) {
		f.Close()
		os.Remove(path)
		return "", Written{}, err
	}
	h := sha256.New()
	src := io.Reader(ctxReader{ctx: ctx, r: rc})
	if limit > 0 {
		src = io.LimitReader(src, limit+1)
	}
	n, err := io.Copy(io.MultiWriter(f, h), src)
	switch {
	case err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)):
		return fail(fmt.Errorf("fetch %s from %s: interrupted: %w; nothing was kept", name, s, err))
	case err != nil:
		return fail(fmt.Errorf("fetch %s from %s: %w; nothing was kept: try again", name, s, err))
	case limit > 0 && n > limit:
		return fail(fmt.Errorf("fetch %s from %s: longer than %d bytes, more than it may be: refused, nothing was kept", name, s, limit))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fetch %s from %s: %w", name, s, err))
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return "", Written{}, fmt.Errorf("fetch %s from %s: %w", name, s, err)
	}
	return path, Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}
