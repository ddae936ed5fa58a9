// Package outfile writes the files devata is asked to write (reports,
// snapshots, bundles, configs) without harming what is at their path: a
// file is replaced only when it is a regular file, atomically (a temporary
// file beside it, synced, renamed over it); a named pipe or the process'
// own output (/dev/stdout, /dev/fd/N) is written through, never replaced;
// anything else (a symbolic link, a device, a directory) is refused,
// saying what is there. It imports nothing of devata's.
package outfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Kind is what is at an output path.
type Kind int

const (
	// Absent: nothing yet; the file is created.
	Absent Kind = iota
	// Regular: a regular file, replaced whole.
	Regular
	// Through: a named pipe or the process' own output, written through.
	Through
)

// Check says what is at path and whether devata may write there: an error
// naming what is there when it would have to replace something that is
// not a regular file.
func Check(path string) (Kind, error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Absent, nil
	case err != nil:
		return Absent, err
	case fi.Mode().IsRegular():
		return Regular, nil
	case fi.Mode()&fs.ModeNamedPipe != 0:
		return Through, nil
	case ownOutput(path):
		return Through, nil
	}
	return Absent, fmt.Errorf("%s is %s: devata replaces only regular files (and writes through a named pipe or /dev/stdout); give the path of a file, or remove what is there", path, describe(fi))
}

// ownOutput says whether path names the process' own standard output or
// error, or one of its descriptors: what a user means by writing there.
func ownOutput(path string) bool {
	switch p := filepath.Clean(path); {
	case p == "/dev/stdout", p == "/dev/stderr":
		return true
	case strings.HasPrefix(p, "/dev/fd/"), strings.HasPrefix(p, "/proc/self/fd/"):
		return true
	}
	return false
}

func describe(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeDevice != 0 || m&fs.ModeCharDevice != 0:
		return "a device"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "not a regular file"
}

// Write writes path with mode through write: atomically when path is
// absent or a regular file, through it when it is a pipe or the process'
// output; refused otherwise (Check). With exclusive, an existing path is
// left alone and ErrExists returned (also when it appears while writing).
func Write(path string, mode fs.FileMode, exclusive bool, write func(io.Writer) error) error {
	kind, err := Check(path)
	if err != nil {
		return err
	}
	if exclusive && kind != Absent {
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	if kind == Through {
		f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
		return f.Close()
	}
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+base+".*.tmp")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	err = tmp.Chmod(mode)       // whatever the umask
	if err == nil {
		err = write(tmp)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if exclusive {
		// Link fails if path appeared meanwhile: never clobber a file made concurrently
		if err := os.Link(tmp.Name(), path); err != nil {
			if errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%s: %w", path, fs.ErrExist)
			}
			return fmt.Errorf("write %s: %w", path, err)
		}
	} else {
		// what is there may have been swapped since Check: replace only a regular file
		if k, err := Check(path); err != nil || k == Through {
			if err == nil {
				err = fmt.Errorf("%s became a pipe while it was written: not replaced", path)
			}
			return err
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if d, err := os.Open(dir); err == nil { // make the rename survive a crash
		_ = d.Sync()
		d.Close()
	}
	return nil
}
