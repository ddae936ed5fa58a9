// Package golden checks test output against files kept in the repository,
// and rewrites those files when the test binary runs with -update. It owns
// the -update flag for every test package that imports it; it knows
// nothing of what the files hold.
package golden

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files")

// Assert fails t unless the file at path holds exactly got. With -update it
// writes got to path instead (creating its directory) and passes. A missing
// or unreadable file stops the test; a difference is reported with the first
// line that differs and the test goes on. It reports whether got matched.
func Assert(t testing.TB, path string, got []byte) bool {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return true
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run %s to create it)", err, rerun(t))
		return false
	}
	if bytes.Equal(got, want) {
		return true
	}
	line, g, w := firstDiff(string(got), string(want))
	t.Errorf("%s differs at line %d\n  got:  %s\n  want: %s\nif the change is intended, run %s and review the diff",
		path, line, g, w, rerun(t))
	return false
}

// firstDiff returns the 1-based number of the first line that differs and
// both sides of it, quoted so that spaces, colour codes and a missing final
// newline show.
func firstDiff(got, want string) (int, string, string) {
	g, w := strings.SplitAfter(got, "\n"), strings.SplitAfter(want, "\n")
	side := func(lines []string, i int) string {
		if i >= len(lines) || (i == len(lines)-1 && lines[i] == "") {
			return "(end)"
		}
		return fmt.Sprintf("%q", lines[i])
	}
	for i := 0; ; i++ {
		if gs, ws := side(g, i), side(w, i); gs != ws {
			return i + 1, gs, ws
		}
	}
}

// rerun is the command that rewrites the goldens of t's top-level test, run
// from the module root.
func rerun(t testing.TB) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return fmt.Sprintf("go test %s -run '^%s$' -update", pkgDir(), name)
}

// pkgDir is the package under test as a path from the module root (go test
// runs a test binary in its package's directory), or "." if no go.mod is
// found above it.
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "."
	}
	for root := wd; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			rel, err := filepath.Rel(root, wd)
			if err != nil || rel == "." {
				return "."
			}
			return "./" + filepath.ToSlash(rel)
		}
		parent := filepath.Dir(root)
		if parent == root {
			return "."
		}
		root = parent
	}
}
