package image

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Platform is the platform of an image for arch, as an index names it.
func Platform(arch string) v1.Platform { return v1.Platform{OS: "linux", Architecture: arch} }

// BuildIndex assembles one image per spec (Build) and an OCI image index
// over them, each entry carrying its platform, so that a runtime pulls the
// image of its own architecture. The specs differ in Arch and Binary only:
// one version, revision, source and creation time, which the index carries
// as annotations too. Entries are ordered by architecture, whatever the
// order of specs, so the same specs give the same index digest. The images
// are returned in the index's order.
func BuildIndex(specs []Spec) (v1.ImageIndex, []v1.Image, error) {
	if len(specs) == 0 {
		return nil, nil, errors.New("image: an index needs at least one image")
	}
	specs = slices.Clone(specs)
	slices.SortFunc(specs, func(a, b Spec) int { return strings.Compare(a.Arch, b.Arch) })
	first := specs[0]
	for i, s := range specs {
		if i > 0 && s.Arch == specs[i-1].Arch {
			return nil, nil, fmt.Errorf("image: two images for linux/%s in one index", s.Arch)
		}
		if s.Version != first.Version || s.Revision != first.Revision || s.Source != first.Source || !s.Created.Equal(first.Created) {
			return nil, nil, fmt.Errorf("image: the images of an index must share version, revision, source and created; linux/%s and linux/%s do not", first.Arch, s.Arch)
		}
	}
	idx := mutate.IndexMediaType(empty.Index, types.OCIImageIndex)
	images := make([]v1.Image, 0, len(specs))
	for _, s := range specs {
		img, err := Build(s)
		if err != nil {
			return nil, nil, fmt.Errorf("linux/%s: %w", s.Arch, err)
		}
		p := Platform(s.Arch)
		idx = mutate.AppendManifests(idx, mutate.IndexAddendum{
			Add:        img,
			Descriptor: v1.Descriptor{MediaType: types.OCIManifestSchema1, Platform: &p},
		})
		images = append(images, img)
	}
	idx = mutate.Annotations(idx, first.Labels()).(v1.ImageIndex)
	if _, err := idx.Digest(); err != nil {
		return nil, nil, fmt.Errorf("image: index: %w", err)
	}
	return idx, images, nil
}
