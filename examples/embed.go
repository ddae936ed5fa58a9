// Package examples holds example inventories and patches. The tests and
// `devata demo` use them; the homelab example is embedded in the binary.
package examples

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed homelab
var files embed.FS

// Homelab is the examples/homelab directory: inventory.yaml and patches/.
func Homelab() fs.FS {
	sub, err := fs.Sub(files, "homelab")
	if err != nil {
		panic(err) // the directory is embedded above; this cannot fail
	}
	return sub
}

// WriteHomelab copies the homelab example into dir and returns the path of its inventory.
func WriteHomelab(dir string) (string, error) {
	err := fs.WalkDir(Homelab(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(Homelab(), path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	return filepath.Join(dir, "inventory.yaml"), err
}
