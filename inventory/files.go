package inventory

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// MaxFileSize bounds every file devata reads on the inventory's behalf: the
// inventory itself, each patch and the secrets bundle.
const MaxFileSize = 4 << 20

// FileError is a file ReadFile refuses to read.
type FileError struct {
	Path, Reason string
}

func (e *FileError) Error() string { return e.Path + " " + e.Reason }

// ReadFile reads a regular file of at most MaxFileSize bytes. Anything else
// (a directory, a FIFO, a device such as /dev/zero) is refused before it is
// read, so that a hostile path can neither hang nor exhaust memory.
func ReadFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &FileError{path, fmt.Sprintf("is not a regular file (%s): devata reads only regular files", fileKind(fi.Mode()))}
	}
	if fi.Size() > MaxFileSize {
		return nil, &FileError{path, fmt.Sprintf("is %d bytes, more than the %d MiB devata reads: split it, or check the path names the file you meant", fi.Size(), MaxFileSize>>20)}
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// the file may have been swapped or grown since the Stat
	if now, err := f.Stat(); err != nil || !now.Mode().IsRegular() || !os.SameFile(fi, now) {
		return nil, &FileError{path, "changed while it was opened: try again"}
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxFileSize {
		return nil, &FileError{path, fmt.Sprintf("grew past the %d MiB devata reads while it was read", MaxFileSize>>20)}
	}
	return data, nil
}

func fileKind(m os.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&os.ModeNamedPipe != 0:
		return "a named pipe"
	case m&os.ModeDevice != 0:
		return "a device"
	case m&os.ModeSocket != 0:
		return "a socket"
	default:
		return m.Type().String()
	}
}

// ErrOutside is returned for a path from the inventory that resolves
// outside the directories it may read.
var ErrOutside = errors.New("outside the inventory's directory")

// Confine resolves p (from the inventory; relative to dir unless absolute)
// and checks that it lies, after symlinks, inside dir or one of the extra
// roots (cluster.readableDirs). A path that does not exist yet (a bundle
// gen secrets will write) is judged by its parent directory.
func Confine(dir string, roots []string, p string) (string, error) {
	full := ResolvePath(dir, p)
	real, err := realPath(full)
	if err != nil {
		return "", err
	}
	for _, root := range append([]string{dir}, roots...) {
		r, err := realPath(root)
		if err != nil {
			continue
		}
		if rel, err := filepath.Rel(r, real); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return full, nil
		}
	}
	if real != filepath.Clean(full) {
		return "", fmt.Errorf("%s resolves to %s, %w: keep patches and the bundle next to the inventory, or list the directory in cluster.readableDirs", p, real, ErrOutside)
	}
	return "", fmt.Errorf("%s is %w: keep patches and the bundle next to the inventory, or list the directory in cluster.readableDirs", p, ErrOutside)
}

// realPath is p with every symlink resolved, made absolute; for a path that
// does not exist, its parent's real path joined with its name.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(abs)
	if err == nil {
		return real, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return filepath.Clean(abs), nil //nolint:nilerr // nothing there to follow; reading it will say so
	}
	return filepath.Join(parent, filepath.Base(abs)), nil
}
