package image

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// refAnnotation names the image in a layout's index.json, as skopeo's
// oci:DIR:TAG and crane read it.
const refAnnotation = "org.opencontainers.image.ref.name"

// WriteLayout writes img as the only image of an OCI image layout at dir,
// named tag in index.json. A layout already at dir is replaced; any other
// non-empty directory is refused.
func WriteLayout(dir string, img v1.Image, tag string) error {
	if err := clearLayout(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: write layout %s: %w", dir, err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{refAnnotation: tag})); err != nil {
		return fmt.Errorf("image: write layout %s: %w", dir, err)
	}
	return nil
}

// WriteIndexLayout writes idx, with every image it holds, as the only
// entry of an OCI image layout at dir, named tag in index.json, with the
// rules of WriteLayout: `skopeo copy --all oci:DIR:TAG` and `crane push
// DIR` push the whole index.
func WriteIndexLayout(dir string, idx v1.ImageIndex, tag string) error {
	if err := clearLayout(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("image: write layout %s: %w", dir, err)
	}
	if err := p.AppendIndex(idx, layout.WithAnnotations(map[string]string{refAnnotation: tag})); err != nil {
		return fmt.Errorf("image: write layout %s: %w", dir, err)
	}
	return nil
}

func clearLayout(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("image: layout directory: %w", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return fmt.Errorf("image: %s is not empty and holds no OCI layout (no oci-layout file): remove it or write elsewhere", dir)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("image: replace the layout at %s: %w", dir, err)
	}
	return nil
}

// WriteTarball writes img as a `docker load`-able tarball tagged ref
// (devata:VERSION), through a temporary file renamed into place.
func WriteTarball(path string, img v1.Image, ref string) error {
	tag, err := name.NewTag(ref)
	if err != nil {
		return fmt.Errorf("image: tag %q: %w", ref, err)
	}
	tmp := path + ".tmp"
	if err := tarball.WriteToFile(tmp, tag, img); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: write tarball %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("image: write tarball %s: %w", path, err)
	}
	return nil
}
