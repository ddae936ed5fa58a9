package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"devata.dev/devata/examples"
	"devata.dev/devata/internal/simtest"
)

// readmeTryIt returns the commands of README's "To try all of this
// without machines" section, in order, with their comments cut.
func readmeTryIt(t *testing.T) [][]string {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "To try all of this without machines")
	if !ok {
		t.Fatal("README has no try-it section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var cmds [][]string
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(section, -1) {
		for line := range strings.Lines(block[1]) {
			line, _, _ = strings.Cut(line, "#")
			if f := strings.Fields(line); len(f) > 0 && f[0] == "devata" {
				cmds = append(cmds, f[1:])
			}
		}
	}
	return cmds
}

// TestReadmeTryItPath runs README's try-it path with its exact commands, in
// a copy of the repository's examples: gen secrets, sim serving until
// interrupted, and, with the export lines sim printed, drift: a healthy
// SIMULATED cluster, exit 0 (issue 17: it ended with exit 2 and every
// machine Unknown).
func TestReadmeTryItPath(t *testing.T) {
	cmds := readmeTryIt(t)
	if len(cmds) != 3 || cmds[0][0] != "gen" || cmds[1][0] != "sim" || cmds[2][0] != "drift" {
		t.Fatalf("README's try-it commands are %q: this test runs gen secrets, sim and drift", cmds)
	}
	repo := t.TempDir()
	if _, err := examples.WriteHomelab(filepath.Join(repo, "examples", "homelab")); err != nil {
		t.Fatal(err)
	}
	t.Chdir(repo)
	simDir := filepath.Join(t.TempDir(), "sim")
	for _, c := range cmds {
		for i, a := range c {
			if a == "/tmp/sim" {
				c[i] = simDir
			}
		}
	}

	if r := devata(t, nil, cmds[0]...); r.code != 0 {
		t.Fatalf("devata %s: exit %d\n%s%s", strings.Join(cmds[0], " "), r.code, r.stdout, r.err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb simtest.Output
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, cmds[1], Streams{In: strings.NewReader(""), Out: &out, Err: &errb}, func(string) string { return "" })
	}()
	deadline := time.Now().Add(10 * time.Minute) // the first run builds kube-apiserver
	for !strings.Contains(out.String(), "serving until interrupted") {
		select {
		case code := <-done:
			t.Fatalf("devata %s exited %d:\n%s%s", strings.Join(cmds[1], " "), code, out.String(), errb.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("sim did not start:\n%s%s", out.String(), errb.String())
		}
	}
	env := map[string]string{}
	for line := range strings.Lines(out.String()) {
		if k, v, ok := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "export ")), "="); ok && strings.HasPrefix(line, "export ") {
			env[k] = v
		}
	}
	for _, k := range []string{"DEVATA_CONFIG", "TALOSCONFIG", "KUBECONFIG"} {
		if env[k] == "" {
			t.Errorf("sim printed no export line for %s:\n%s", k, out.String())
		}
	}

	r := devata(t, env, cmds[2]...)
	if r.code != 0 || !strings.Contains(r.stdout, "0 drifted, 0 unknown") || strings.Contains(r.stdout, "Unknown") {
		t.Errorf("devata %s on the fresh sim: exit %d, want 0 with every check InSync\n%s%s", strings.Join(cmds[2], " "), r.code, r.stdout, r.err)
	}

	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("sim exited %d after interrupt:\n%s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("sim did not stop on interrupt")
	}
}

// TestReadmeInstallsDevataBeforeUsingIt holds README to saying how devata
// gets on PATH before its first `devata …` command, and the install line to
// name this command's package (issue 33: the try-it path assumed a devata
// on PATH that nothing put there).
func TestReadmeInstallsDevataBeforeUsingIt(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	installed := false
	for _, block := range regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(b), -1) {
		for line := range strings.Lines(block[1]) {
			line, _, _ = strings.Cut(line, "#")
			f := strings.Fields(line)
			switch {
			case len(f) == 3 && f[0] == "go" && f[1] == "install":
				if f[2] != "./cmd/devata" {
					t.Errorf("README installs %q, want ./cmd/devata", f[2])
				}
				installed = true
			case len(f) > 0 && f[0] == "devata" && !installed:
				t.Fatalf("README runs %q before any `go install ./cmd/devata` line", strings.Join(f, " "))
			}
		}
	}
	if !installed {
		t.Fatal("README has no `go install ./cmd/devata` line")
	}
	if !strings.Contains(string(b), "go env GOPATH)/bin") {
		t.Error("README does not say where go install puts devata (PATH)")
	}
	// the line installs a command named devata: a main package in cmd/devata
	src, err := os.ReadFile("main.go")
	if err != nil || !strings.HasPrefix(strings.TrimLeft(string(regexp.MustCompile(`(?m)^//.*\n`).ReplaceAll(src, nil)), "\n"), "package main") {
		t.Errorf("cmd/devata/main.go is not package main (%v)", err)
	}
}
