package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// dirStore is a local directory, opened as an os.Root: no name, and no
// symbolic link inside the directory, reaches outside it, and the objects
// themselves are never opened through a symbolic link (O_NOFOLLOW).
type dirStore struct {
	dir     string
	display string
	root    *os.Root
}

func openDir(dir, display string, opts Options) (Store, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("backup destination %s: %w", display, err)
	}
	st, err := os.Stat(abs)
	switch {
	case errors.Is(err, fs.ErrNotExist) && opts.CreateDir:
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return nil, fmt.Errorf("backup destination %s: create the directory: %w", display, err)
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("backup destination %s: the directory %s does not exist: create it (mkdir -p %s), or end the path with a slash to have devata create it", display, abs, abs)
	case err != nil:
		return nil, fmt.Errorf("backup destination %s: %w", display, err)
	case !st.IsDir():
		return nil, fmt.Errorf("backup destination %s: %s is not a directory: name a directory (a snapshot's name is chosen by devata or given after the last slash)", display, abs)
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, fmt.Errorf("backup destination %s: %w", display, err)
	}
	return &dirStore{dir: abs, display: display, root: root}, nil
}

func (d *dirStore) String() string { return d.display }
func (d *dirStore) Close() error   { return d.root.Close() }

func (d *dirStore) fail(op string, err error) error {
	e := &opError{store: d.display, op: op, err: err}
	switch {
	case errors.Is(err, fs.ErrNotExist):
		e.kind = ErrNotFound
		e.hint = "list what is there with devata backup list " + d.display
	case errors.Is(err, fs.ErrPermission):
		e.kind = ErrDenied
		e.hint = fmt.Sprintf("devata runs as uid %d: give it write access to %s", os.Getuid(), d.dir)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		e.hint = "interrupted; nothing was left under the name"
	}
	return e
}

// Put writes a hidden temporary file, syncs it, and renames it over name,
// replacing only a regular file; the directory is synced so the rename
// survives a crash.
func (d *dirStore) Put(ctx context.Context, name string, r io.Reader) (Written, error) {
	if err := checkName(d, name); err != nil {
		return Written{}, err
	}
	op := "put " + name
	if fi, err := d.root.Lstat(name); err == nil && !fi.Mode().IsRegular() {
		return Written{}, fmt.Errorf("backup store %s: %s: %s is %s: devata replaces only regular files; remove it", d.display, op, name, describe(fi))
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := "." + name + "." + hex.EncodeToString(rnd[:]) + ".tmp"
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return Written{}, d.fail(op, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			_ = d.root.Remove(tmp)
		}
	}()
	if err := f.Chmod(0o600); err != nil { // whatever the umask
		return Written{}, d.fail(op, err)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(io.MultiWriter(f, h), ctxReader{ctx, r}, make([]byte, 1<<20))
	if err != nil {
		return Written{}, d.fail(op, err)
	}
	if err := f.Sync(); err != nil {
		return Written{}, d.fail(op, err)
	}
	if err := f.Close(); err != nil {
		done = true
		_ = d.root.Remove(tmp)
		return Written{}, d.fail(op, err)
	}
	done = true
	if err := ctx.Err(); err != nil {
		_ = d.root.Remove(tmp)
		return Written{}, d.fail(op, err)
	}
	if err := d.root.Rename(tmp, name); err != nil {
		_ = d.root.Remove(tmp)
		return Written{}, d.fail(op, err)
	}
	d.syncDir()
	return Written{Size: n, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

func (d *dirStore) syncDir() {
	if dir, err := d.root.Open("."); err == nil {
		_ = dir.Sync()
		dir.Close()
	}
}

func (d *dirStore) Get(ctx context.Context, name string) (io.ReadCloser, error) {
	if err := checkName(d, name); err != nil {
		return nil, err
	}
	if fi, err := d.root.Lstat(name); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("backup store %s: get %s: a symbolic link: devata reads only regular files", d.display, name)
	}
	// O_NOFOLLOW too: a link swapped in after the Lstat is not followed.
	f, err := d.root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("backup store %s: get %s: a symbolic link: devata reads only regular files", d.display, name)
		}
		return nil, d.fail("get "+name, err)
	}
	fi, err := f.Stat()
	if err == nil && !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("backup store %s: get %s: %s, not a regular file", d.display, name, describe(fi))
	}
	return f, nil
}

func (d *dirStore) List(ctx context.Context) ([]Object, error) {
	dir, err := d.root.Open(".")
	if err != nil {
		return nil, d.fail("list", err)
	}
	defer dir.Close()
	entries, err := dir.ReadDir(-1)
	if err != nil {
		return nil, d.fail("list", err)
	}
	var out []Object
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") || !e.Type().IsRegular() {
			continue // uploads in progress, links, directories
		}
		fi, err := e.Info()
		if err != nil {
			continue // removed meanwhile
		}
		out = append(out, Object{Name: e.Name(), Size: fi.Size(), ModTime: fi.ModTime().UTC()})
	}
	slices.SortFunc(out, func(a, b Object) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

func (d *dirStore) Delete(ctx context.Context, name string) error {
	if err := checkName(d, name); err != nil {
		return err
	}
	fi, err := d.root.Lstat(name)
	if err != nil {
		return d.fail("delete "+name, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("backup store %s: delete %s: %s: devata deletes only regular files", d.display, name, describe(fi))
	}
	if err := d.root.Remove(name); err != nil {
		return d.fail("delete "+name, err)
	}
	d.syncDir()
	return nil
}

func describe(fi fs.FileInfo) string {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	}
	return "not a regular file"
}
