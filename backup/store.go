package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"devata.dev/devata/internal/outfile"
)

// object is one object of a store: a snapshot or a sidecar.
type object struct {
	Name    string
	Size    int64
	ModTime time.Time
}

// store is where snapshots and their sidecars live, by name: list, verify
// and prune go through it alone. It has the shape of backup/store's Store
// (Open(ctx, url) -> Put, Get, List, Delete), so that an object store
// plugs in where dirStore is; dirStore is the local directory devata
// writes with -o DIR/.
type store interface {
	// List is every object, unordered.
	List(ctx context.Context) ([]object, error)
	// Get opens name for reading.
	Get(ctx context.Context, name string) (io.ReadCloser, error)
	// Put writes name whole or not at all: a reader sees the old object
	// or the new one.
	Put(ctx context.Context, name string, r io.Reader) error
	// Delete removes name.
	Delete(ctx context.Context, name string) error
	// String names the store in messages.
	String() string
}

// dirStore is a local directory: its regular files are its objects.
// Symbolic links, directories and anything else are not objects; none is
// followed, opened or removed.
type dirStore struct{ dir string }

func (d dirStore) String() string { return d.dir }

func (d dirStore) path(name string) (string, error) {
	if name == "" || name != filepath.Base(name) || name == "." || name == ".." {
		return "", fmt.Errorf("%q is not an object name in %s", name, d.dir)
	}
	return filepath.Join(d.dir, name), nil
}

func (d dirStore) List(ctx context.Context) ([]object, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var out []object
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() { // ReadDir's type is Lstat's: a link is not followed
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone since ReadDir
		}
		out = append(out, object{Name: e.Name(), Size: fi.Size(), ModTime: fi.ModTime()})
	}
	return out, nil
}

// Get opens name without following a link and without blocking on a
// FIFO, and only when it is a regular file.
func (d dirStore) Get(_ context.Context, name string) (io.ReadCloser, error) {
	p, err := d.path(name)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, fmt.Errorf("%s is a symbolic link: devata reads backups only from regular files; name the file itself", p)
	}
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file (%s): devata reads backups only from regular files", p, st.Mode().Type())
	}
	return f, nil
}

func (d dirStore) Put(_ context.Context, name string, r io.Reader) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	return outfile.Write(p, 0o600, false, func(w io.Writer) error {
		_, err := io.Copy(w, r)
		return err
	})
}

// Delete removes name only when it is a regular file: never a link (nor
// what it points to), a directory or a device.
func (d dirStore) Delete(_ context.Context, name string) error {
	p, err := d.path(name)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file (%s): not removing it", p, fi.Mode().Type())
	}
	return os.Remove(p)
}
