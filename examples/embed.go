// Package examples holds example inventories and patches. The tests and
// `devata demo` use them; the homelab example is embedded in the binary.
package examples

import (
	"embed"
	"io/fs"
	"os"
	"path/filepath"
)

//go:embed homelab homelab-v1.14
var files embed.FS

// The examples, by directory name.
const (
	// HomelabName is the homelab as a Talos 1.11 operator writes it.
	HomelabName = "homelab"
	// HomelabV114Name is the same homelab on Talos 1.14, written with the
	// configuration documents of 1.12 and later.
	HomelabV114Name = "homelab-v1.14"
)

// Homelab is the examples/homelab directory: inventory.yaml and patches/.
func Homelab() fs.FS { return Example(HomelabName) }

// Example is the examples/<name> directory.
func Example(name string) fs.FS {
	sub, err := fs.Sub(files, name)
	if err != nil {
		panic(err) // the directories are embedded above; this cannot fail
	}
	return sub
}

// WriteHomelab copies the homelab example into dir and returns the path of its inventory.
func WriteHomelab(dir string) (string, error) { return WriteExample(dir, HomelabName) }

// WriteExample copies the named example into dir and returns the path of
// its inventory.
func WriteExample(dir, name string) (string, error) {
	example := Example(name)
	err := fs.WalkDir(example, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, path)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		data, err := fs.ReadFile(example, path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, data, 0o644)
	})
	return filepath.Join(dir, "inventory.yaml"), err
}
