package drift

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCompareNames(t *testing.T) {
	want := []string{"cp-1", "cp-2", "cp-10", "node", "node-01", "node-1", "node-2a", "node-2b", "node-10", "worker-9", "worker-10"}
	got := slices.Clone(want)
	slices.Reverse(got)
	slices.SortFunc(got, compareNames)
	if !slices.Equal(got, want) {
		t.Errorf("sorted %q, want %q", got, want)
	}
	for _, a := range want {
		for _, b := range want {
			if (compareNames(a, b) == 0) != (a == b) || compareNames(a, b) != -compareNames(b, a) {
				t.Errorf("compareNames(%q, %q) = %d is not a total order", a, b, compareNames(a, b))
			}
		}
	}
}

func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"plain":                                "plain",
		"  padded \n":                          "padded",
		"1 error occurred:\n\t* a\n\n":         "1 error occurred: a",
		"2 errors occurred:\n\t* a\n\t* b\n\n": "2 errors occurred: a; b",
		"first\r\nsecond":                      "first; second",
		"":                                     "",
	} {
		if got := oneLine(in); got != want {
			t.Errorf("oneLine(%q) = %q, want %q", in, got, want)
		}
	}
}

// A write that fails half way leaves the previous file whole and no temporary file.
func TestWriteFileAtomicFailure(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "devata.prom")
	if err := os.WriteFile(path, []byte("previous\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := writeFileAtomic(path, 0o644, func(w io.Writer) error {
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
	err := writeFileAtomic(path, 0o644, func(w io.Writer) error {
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

func TestRungOrder(t *testing.T) {
	for i, r := range Rungs() {
		if r.order() != i {
			t.Errorf("%s.order() = %d, want %d", r, r.order(), i)
		}
	}
	if Rung("custom").order() != len(Rungs()) {
		t.Errorf("an unknown rung does not sort last")
	}
}
