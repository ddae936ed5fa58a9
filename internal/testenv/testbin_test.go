package testenv

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDefaultDir(t *testing.T) {
	t.Run("env", func(t *testing.T) {
		want := t.TempDir()
		t.Setenv(DirEnv, want)
		got, err := DefaultDir()
		if err != nil || got != want {
			t.Errorf("DefaultDir() = %q, %v; want %q", got, err, want)
		}
	})
	t.Run("user cache", func(t *testing.T) {
		t.Setenv(DirEnv, "")
		cache := t.TempDir()
		t.Setenv("XDG_CACHE_HOME", cache)
		got, err := DefaultDir()
		want := filepath.Join(cache, "devata", "testbin", "k8s-v1.37.2-etcd-v3.6.6")
		if err != nil || got != want {
			t.Errorf("DefaultDir() = %q, %v; want %q", got, err, want)
		}
	})
}

// With both binaries in place Install neither locks nor builds: the fake
// files here would fail any build or version check.
func TestInstallComplete(t *testing.T) {
	dir := t.TempDir()
	for _, b := range binaries {
		if err := os.WriteFile(filepath.Join(dir, b.name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var progress strings.Builder
	if err := Install(t.Context(), dir, &progress); err != nil {
		t.Fatal(err)
	}
	if progress.Len() != 0 {
		t.Errorf("progress = %q, want none", progress.String())
	}
	if _, err := os.Stat(filepath.Join(dir, ".lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("lock file created: %v", err)
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), ".lock")
	unlock, err := lock(t.Context(), path, io.Discard)
	if err != nil {
		t.Fatal(err)
	}

	// flock excludes a second open file description, in this process too.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	var progress strings.Builder
	if _, err := lock(ctx, path, &progress); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second lock while held: err = %v, want deadline exceeded", err)
	}
	if !strings.Contains(progress.String(), "waiting for another process") {
		t.Errorf("progress = %q, want a waiting line", progress.String())
	}

	done := make(chan error, 1)
	go func() {
		unlock2, err := lock(t.Context(), path, io.Discard)
		if err == nil {
			unlock2()
		}
		done <- err
	}()
	unlock()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lock not acquired after release")
	}
}

func TestKubeVersionFlags(t *testing.T) {
	got := kubeVersionFlags("v1.37.2")
	for _, want := range []string{
		"k8s.io/component-base/version.gitVersion=v1.37.2",
		"k8s.io/component-base/version.gitMajor=1",
		"k8s.io/component-base/version.gitMinor=37",
		"k8s.io/client-go/pkg/version.gitVersion=v1.37.2",
	} {
		if !slices.Contains(got, want) {
			t.Errorf("flags %q lack %q", got, want)
		}
	}
}

func TestSourceDir(t *testing.T) {
	src, err := sourceDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range binaries {
		for _, f := range []string{"go.mod", "go.sum"} {
			if _, err := os.Stat(filepath.Join(src, b.module, f)); err != nil {
				t.Errorf("wrapper module %s: %v", b.module, err)
			}
		}
	}
}
