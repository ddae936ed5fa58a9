package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fakeT records what Assert reports. Its Fatal ends the goroutine, as
// testing.T's does, so Assert must be called through run.
type fakeT struct {
	testing.TB // nil: a method Assert is not meant to call panics
	errors     []string
	fatal      bool
}

func (f *fakeT) Helper()      {}
func (f *fakeT) Name() string { return "TestReport/table" }
func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

func (f *fakeT) Fatal(args ...any) {
	f.errors = append(f.errors, fmt.Sprint(args...))
	f.fatal = true
	runtime.Goexit()
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.Fatal(fmt.Sprintf(format, args...))
}

// run calls Assert on a fake in a goroutine of its own, so that a Fatal
// ends only that goroutine.
func run(path string, got []byte) (*fakeT, bool) {
	f := &fakeT{}
	ok := false
	done := make(chan struct{})
	go func() {
		defer close(done)
		ok = Assert(f, path, got)
	}()
	<-done
	return f, ok
}

func setUpdate(t *testing.T, v bool) {
	old := *update
	*update = v
	t.Cleanup(func() { *update = old })
}

func TestAssert(t *testing.T) {
	setUpdate(t, false)
	path := filepath.Join(t.TempDir(), "report.txt")
	if err := os.WriteFile(path, []byte("header\ncp-1 ok\nworker-1 ok\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		got  string
		want []string // in the one error, in order; none: Assert passes
	}{
		{"match", "header\ncp-1 ok\nworker-1 ok\n", nil},
		{"line differs", "header\ncp-1 ok\nworker-1 DRIFT\n",
			[]string{path + " differs at line 3", `got:  "worker-1 DRIFT\n"`, `want: "worker-1 ok\n"`,
				"if the change is intended, run go test ./internal/golden -run '^TestReport$' -update"}},
		{"got is short", "header\ncp-1 ok\n",
			[]string{"line 3", "got:  (end)", `want: "worker-1 ok\n"`}},
		{"got is long", "header\ncp-1 ok\nworker-1 ok\nworker-2 ok\n",
			[]string{"line 4", `got:  "worker-2 ok\n"`, "want: (end)"}},
		{"final newline missing", "header\ncp-1 ok\nworker-1 ok",
			[]string{"line 3", `got:  "worker-1 ok"`, `want: "worker-1 ok\n"`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := run(path, []byte(tt.got))
			if ok != (tt.want == nil) || f.fatal {
				t.Errorf("Assert returned %v (fatal %v); errors: %q", ok, f.fatal, f.errors)
			}
			if tt.want == nil {
				if len(f.errors) != 0 {
					t.Errorf("Assert failed on a match: %q", f.errors)
				}
				return
			}
			if len(f.errors) != 1 {
				t.Fatalf("want one error, got %q", f.errors)
			}
			msg := f.errors[0]
			for _, w := range tt.want {
				i := strings.Index(msg, w)
				if i < 0 {
					t.Fatalf("error lacks %q (or has it out of order):\n%s", w, f.errors[0])
				}
				msg = msg[i+len(w):]
			}
		})
	}
}

func TestAssertMissingFile(t *testing.T) {
	setUpdate(t, false)
	path := filepath.Join(t.TempDir(), "testdata", "absent.txt")
	f, ok := run(path, []byte("x\n"))
	if ok || !f.fatal || len(f.errors) != 1 || !strings.Contains(f.errors[0], "-update to create it") {
		t.Errorf("Assert on a missing file: ok %v, fatal %v, errors %q", ok, f.fatal, f.errors)
	}
}

func TestAssertUpdateWrites(t *testing.T) {
	setUpdate(t, true)
	path := filepath.Join(t.TempDir(), "testdata", "sub", "new.txt")
	f, ok := run(path, []byte("fresh\n"))
	if !ok || len(f.errors) != 0 {
		t.Fatalf("Assert with -update: ok %v, errors %q", ok, f.errors)
	}
	data, err := os.ReadFile(path)
	if err != nil || string(data) != "fresh\n" {
		t.Fatalf("written %q, %v", data, err)
	}
	if info, err := os.Stat(path); err != nil {
		t.Error(err)
	} else if info.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", info.Mode().Perm())
	}
	// Rewriting a golden that differs passes too: -update is how it changes.
	if f, ok := run(path, []byte("newer\n")); !ok || len(f.errors) != 0 {
		t.Errorf("rewrite: ok %v, errors %q", ok, f.errors)
	}
	setUpdate(t, false)
	if f, ok := run(path, []byte("newer\n")); !ok || len(f.errors) != 0 {
		t.Errorf("compare after rewrite: ok %v, errors %q", ok, f.errors)
	}
}
