package bootstrap_test

import (
	"os"
	"testing"
)

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return data
}
