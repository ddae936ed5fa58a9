package outfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"devata.dev/devata/internal/outfile"
)

// A write that fails half way leaves the previous file whole and no temporary file.
func TestWriteFileAtomicFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devata.prom")
	if err := os.WriteFile(path, []byte("previous\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := outfile.Write(path, 0o644, false, func(w io.Writer) error {
		if _, err := io.WriteString(w, "half of a new fi"); err != nil {
			return err
		}
		return errors.New("encoder broke")
	})
	if err == nil || !strings.Contains(err.Error(), "encoder broke") || !strings.Contains(err.Error(), path) {
		t.Errorf("err = %v, want the write error naming the file", err)
	}
	got, rerr := os.ReadFile(path)
	if rerr != nil || string(got) != "previous\n" {
		t.Errorf("file now %q, %v; want the previous content", got, rerr)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only devata.prom", names)
	}
}

// While being written, the temporary file never has a name the textfile
// collector reads (*.prom).
func TestWriteFileAtomicTempName(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devata.prom")
	var during []string
	err := outfile.Write(path, 0o644, false, func(w io.Writer) error {
		entries, err := os.ReadDir(dir)
		for _, e := range entries {
			during = append(during, e.Name())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(during) != 1 || strings.HasSuffix(during[0], ".prom") || !strings.HasPrefix(during[0], ".") {
		t.Errorf("during the write the directory held %v, want one hidden non-.prom file", during)
	}
}

// Probe 7 of issue 31: --junit-file, --html-file, --prom-file pointed at
// a symbolic link or a device replaced it with a regular file, and
// `backup etcd -o /dev/null --force` (as root) turned /dev/null into a 0600
// file. Only a regular file is replaced; a link and a device are refused,
// left as they are, saying what is there; a named pipe is written through.
func TestOnlyRegularFilesAreReplaced(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "secrets.yaml")
	if err := os.WriteFile(victim, []byte("keep me\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "drift.xml")
	if err := os.Symlink(victim, link); err != nil {
		t.Fatal(err)
	}
	write := func(path string) error {
		return outfile.Write(path, 0o644, false, func(w io.Writer) error {
			_, err := io.WriteString(w, "report\n")
			return err
		})
	}
	if err := write(link); err == nil || !strings.Contains(err.Error(), "is a symbolic link: devata replaces only regular files") {
		t.Errorf("a symlink to the bundle: %v", err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v, %v", fi, err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me\n" {
		t.Errorf("the bundle changed: %q", b)
	}
	if err := write("/dev/null"); err == nil || !strings.Contains(err.Error(), "/dev/null is a device") {
		t.Errorf("/dev/null: %v", err)
	}
	if fi, err := os.Lstat("/dev/null"); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("/dev/null is no longer a device: %v, %v", fi, err)
	}
	if err := write(dir); err == nil || !strings.Contains(err.Error(), "is a directory") {
		t.Errorf("a directory: %v", err)
	}

	fifo := filepath.Join(dir, "report.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		defer f.Close()
		b, _ := io.ReadAll(f)
		got <- string(b)
	}()
	if err := write(fifo); err != nil {
		t.Fatalf("a named pipe: %v", err)
	}
	if s := <-got; s != "report\n" {
		t.Errorf("read from the pipe: %q", s)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Errorf("the pipe was replaced: %v, %v", fi, err)
	}

	regular := filepath.Join(dir, "drift.prom")
	if err := os.WriteFile(regular, []byte("old\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := write(regular); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(regular); string(b) != "report\n" {
		t.Errorf("a regular file: %q", b)
	}
	if err := outfile.Write(regular, 0o600, true, func(io.Writer) error { return nil }); !errors.Is(err, os.ErrExist) {
		t.Errorf("exclusive over an existing file: %v", err)
	}
}
