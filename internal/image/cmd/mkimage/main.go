// Command mkimage builds devata's container image without a Docker daemon:
// a static devata binary on a distroless-style base made from scratch,
// written as an OCI image layout (OUT/oci) and a docker-loadable tarball
// (OUT/devata.tar, tagged devata:VERSION). With -arch amd64,arm64 the layout
// holds an image index over one image per architecture. `go tool -modfile=tools/go.mod
// task image` runs it; docs/image.md says what is in the image and how to
// push it.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"devata.dev/devata/internal/image"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("mkimage", flag.ContinueOnError)
	fl.SetOutput(stderr)
	out := fl.String("o", "dist/image", "output directory: OUT/oci is the OCI layout, OUT/devata.tar the docker tarball")
	arch := fl.String("arch", runtime.GOARCH, "GOARCH of the image (linux only); several, comma-separated (amd64,arm64), make an image index with one image each")
	version := fl.String("version", "", "version to stamp and tag (default: git describe --tags --always --dirty)")
	revision := fl.String("revision", "", "commit for the revision label (default: git rev-parse HEAD)")
	source := fl.String("source", "", "source label (default: the origin remote's URL, else "+image.DefaultSource+")")
	caFile := fl.String("ca-bundle", "", "PEM file of trusted roots, e.g. /etc/ssl/certs/ca-certificates.crt (default: the NSS roots golang.org/x/crypto/x509roots/fallback pins)")
	zoneinfo := fl.Bool("zoneinfo", true, "include the Go toolchain's zoneinfo.zip")
	tar := fl.Bool("tarball", true, "also write OUT/devata.tar for docker load")
	if err := fl.Parse(args); err != nil {
		return 64
	}
	if fl.NArg() > 0 {
		fmt.Fprintf(stderr, "mkimage: unexpected arguments %q\n", fl.Args())
		return 64
	}
	if err := build(ctx, *out, *arch, *version, *revision, *source, *caFile, *zoneinfo, *tar, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "mkimage: %v\n", err)
		return 2
	}
	return 0
}

func build(ctx context.Context, out, archList, version, revision, source, caFile string, zoneinfo, tar bool, stdout, stderr io.Writer) error {
	arches, err := parseArches(archList)
	if err != nil {
		return err
	}
	st, err := image.ReadStamp(ctx, "")
	if err != nil {
		return err
	}
	if version != "" {
		st.Version = version
	}
	if revision != "" {
		st.Revision = revision
	}
	if source != "" {
		st.Source = source
	}
	if err := image.CheckVersion(st.Version); err != nil {
		return err
	}
	spec := image.Spec{Version: st.Version, Revision: st.Revision, Source: st.Source, Created: st.Created}
	caFrom := "the NSS roots of golang.org/x/crypto/x509roots/fallback"
	if caFile != "" {
		if spec.CABundle, err = image.ReadCABundle(caFile); err != nil {
			return err
		}
		caFrom = caFile
	} else {
		spec.CABundle = image.FallbackCABundle()
	}
	if zoneinfo {
		if spec.Zoneinfo, err = image.GoZoneinfo(ctx); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return fmt.Errorf("output directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	// One binary and image per architecture; the go command's cache keeps
	// a rebuild of the same commit cheap.
	var specs []image.Spec
	for _, arch := range arches {
		s := spec
		s.Arch = arch
		s.Binary = filepath.Join(tmp, "devata-"+arch)
		fmt.Fprintf(stderr, "building devata %s for linux/%s…\n", st.Version, arch)
		if err := image.BuildBinary(ctx, "", s.Binary, arch, st.Version, stderr); err != nil {
			return err
		}
		specs = append(specs, s)
	}
	tag := "devata:" + st.Version
	layoutDir := filepath.Join(out, "oci")
	img, what, err := writeLayout(layoutDir, specs, st.Version, stdout)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s; revision %s; created %s from the %s; CA roots: %s)\n",
		what, st.Revision, st.Created.Format("2006-01-02T15:04:05Z"), st.CreatedFrom, caFrom)
	if tar {
		path := filepath.Join(out, "devata.tar")
		if err := image.WriteTarball(path, img, tag); err != nil {
			return err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return fmt.Errorf("image config: %w", err)
		}
		fmt.Fprintf(stdout, "%s\t%s (linux/%s; docker load -i %s)\n", path, tag, cf.Architecture, path)
	}
	return nil
}

// parseArches reads -arch: a comma-separated list, each once, each one the
// image package builds.
func parseArches(archList string) ([]string, error) {
	var arches []string
	for _, a := range strings.Split(archList, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(arches, a) {
			arches = append(arches, a)
		}
	}
	if len(arches) == 0 {
		return nil, fmt.Errorf("-arch names no architecture")
	}
	for _, a := range arches {
		if err := image.CheckArch(a); err != nil {
			return nil, err
		}
	}
	return arches, nil
}

// writeLayout builds the image (one spec) or image index (several) into
// the OCI layout at layoutDir. img is the image the docker tarball holds
// (this machine's platform, else the first); what describes the layout.
func writeLayout(layoutDir string, specs []image.Spec, version string, stdout io.Writer) (img v1.Image, what string, err error) {
	if len(specs) == 1 {
		if img, err = image.Build(specs[0]); err != nil {
			return nil, "", err
		}
		if err := image.WriteLayout(layoutDir, img, version); err != nil {
			return nil, "", err
		}
		digest, err := img.Digest()
		if err != nil {
			return nil, "", fmt.Errorf("image digest: %w", err)
		}
		what = fmt.Sprintf("%s\t%s (OCI layout, ref %s", layoutDir, digest, version)
	} else {
		idx, images, err := image.BuildIndex(specs)
		if err != nil {
			return nil, "", err
		}
		if err := image.WriteIndexLayout(layoutDir, idx, version); err != nil {
			return nil, "", err
		}
		digest, err := idx.Digest()
		if err != nil {
			return nil, "", fmt.Errorf("index digest: %w", err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			return nil, "", fmt.Errorf("index: %w", err)
		}
		for i, d := range im.Manifests {
			fmt.Fprintf(stdout, "%s\t%s (linux/%s)\n", layoutDir, d.Digest, d.Platform.Architecture)
			// docker load takes one platform: the machine's, else the first
			if img == nil || d.Platform.Architecture == runtime.GOARCH {
				img = images[i]
			}
		}
		what = fmt.Sprintf("%s\t%s (OCI layout, image index of %d platforms, ref %s", layoutDir, digest, len(im.Manifests), version)
	}
	return img, what, nil
}
