package main

import (
	"os"
	"path/filepath"
)

type fileWriter = os.File

// writeFileWith writes a report file atomically: a temporary file in the same
// directory, renamed over path once complete, so readers never see half a file.
func writeFileWith(path string, write func(*fileWriter) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) //nolint:errcheck // gone after the rename
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
