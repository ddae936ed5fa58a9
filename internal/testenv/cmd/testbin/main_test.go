package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"devata.dev/devata/internal/testenv"
)

func TestRun(t *testing.T) {
	// A directory that already holds every binary: run reports it and
	// builds nothing.
	full := t.TempDir()
	for _, name := range []string{"etcd", "kube-apiserver", "versitygw-" + testenv.VersitygwVersion, "node_exporter-" + testenv.NodeExporterVersion} {
		if err := os.WriteFile(filepath.Join(full, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	// With the suites binary there too, -talosapi builds nothing either.
	withAPI := t.TempDir()
	names := []string{"etcd", "kube-apiserver", "versitygw-" + testenv.VersitygwVersion, "node_exporter-" + testenv.NodeExporterVersion}
	for _, v := range testenv.TalosAPIVersions {
		names = append(names, "talos-integration-"+v)
	}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(withAPI, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}

	tests := []struct {
		name       string
		args       []string
		env        string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{name: "dir flag", args: []string{"-dir", full}, wantStdout: full + "\n"},
		{name: "env", env: full, wantStdout: full + "\n"},
		{name: "talosapi cached", args: []string{"-dir", withAPI, "-talosapi"}, wantStdout: withAPI + "\n"},
		{name: "extra argument", args: []string{"build"}, wantCode: 2, wantStderr: "unexpected arguments"},
		{name: "unknown flag", args: []string{"-force"}, wantCode: 2, wantStderr: "flag provided but not defined"},
		{name: "unknown talosctl", args: []string{"-dir", full, "-talosctl-versions", "v1.11.0,v1.9.0"}, wantCode: 2, wantStderr: `no talosctl "v1.9.0" to build`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("DEVATA_TESTBIN_DIR", tt.env)
			var stdout, stderr strings.Builder
			code := run(t.Context(), tt.args, &stdout, &stderr)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", code, tt.wantCode, stderr.String())
			}
			if stdout.String() != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", stdout.String(), tt.wantStdout)
			}
			if !strings.Contains(stderr.String(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr.String(), tt.wantStderr)
			}
		})
	}
}
