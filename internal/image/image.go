// Package image assembles devata's container image without a Docker daemon:
// a distroless-style base made here from scratch (users, nsswitch, /tmp, CA
// roots, zoneinfo) and a layer holding the static devata binary, written as an
// OCI image layout or a docker-loadable tarball. It does not push; crane or
// skopeo do that (docs/image.md).
package image

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The user the image runs as: distroless' nonroot, which deploy/ names in
// runAsUser and runAsGroup.
const (
	UID  = 65532
	GID  = 65532
	User = "65532:65532"
	Home = "/home/nonroot"
)

// Paths inside the image.
const (
	BinaryPath   = "/devata"
	CABundlePath = "/etc/ssl/certs/ca-certificates.crt"
	ZoneinfoPath = "/usr/local/go/lib/time/zoneinfo.zip"
)

// maxBinary bounds the devata binary read into the layer (it is about 100 MiB
// stripped); maxSmall bounds the CA bundle and zoneinfo.
const (
	maxBinary = 512 << 20
	maxSmall  = 8 << 20
)

// Spec is everything the image is made from; the same Spec gives the same
// image digest.
type Spec struct {
	// Binary is the path of a static linux devata binary (BuildBinary).
	Binary string
	// Arch is its GOARCH: amd64, arm64, …
	Arch string
	// Version, Revision and Source fill the OCI labels; Version is what
	// `devata version` prints.
	Version  string
	Revision string
	Source   string
	// Created is the image's creation time and every file's mtime: the
	// commit time or SOURCE_DATE_EPOCH, never the wall clock.
	Created time.Time
	// CABundle is the PEM bundle of trusted roots (FallbackCABundle or a
	// file the builder read).
	CABundle []byte
	// Zoneinfo is Go's lib/time/zoneinfo.zip, or nil to leave it out.
	Zoneinfo []byte
	// Store writes the layers gzipped at gzip.NoCompression: for tests,
	// which build the image several times, under -race too, where
	// compressing 80 MB takes minutes. Everything else is as without it.
	Store bool
}

// Build assembles the image: an OCI manifest with two layers, the base and
// the binary, and a config that runs /devata as 65532:65532.
func Build(s Spec) (v1.Image, error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	bin, err := readBounded(s.Binary, maxBinary)
	if err != nil {
		return nil, fmt.Errorf("image: read the devata binary: %w", err)
	}
	if !bytes.HasPrefix(bin, []byte("\x7fELF")) {
		return nil, fmt.Errorf("image: %s is not an ELF binary: build it with GOOS=linux (image.BuildBinary)", s.Binary)
	}
	if err := checkMachine(s.Binary, bin, s.Arch); err != nil {
		return nil, err
	}
	s.Created = s.Created.UTC().Truncate(time.Second)
	created := s.Created

	level := gzip.DefaultCompression
	if s.Store {
		level = gzip.NoCompression
	}
	base, err := layer(created, level, s.baseFiles())
	if err != nil {
		return nil, fmt.Errorf("image: base layer: %w", err)
	}
	app, err := layer(created, level, []file{{name: BinaryPath, mode: 0o755, data: bin}})
	if err != nil {
		return nil, fmt.Errorf("image: devata layer: %w", err)
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: base, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "devata internal/image: base (passwd, group, nsswitch.conf, /tmp, CA roots, zoneinfo)"}},
		mutate.Addendum{Layer: app, History: v1.History{Created: v1.Time{Time: created}, CreatedBy: "devata internal/image: /devata " + s.Version}},
	)
	if err != nil {
		return nil, fmt.Errorf("image: append layers: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	cf = cf.DeepCopy()
	cf.Architecture = s.Arch
	cf.OS = "linux"
	cf.Created = v1.Time{Time: created}
	cf.Config = s.config()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("image: config: %w", err)
	}
	return img, nil
}

// elfMachines are the ELF machines of the GOARCHes an image may be for.
var elfMachines = map[string]elf.Machine{
	"amd64":   elf.EM_X86_64,
	"arm64":   elf.EM_AARCH64,
	"386":     elf.EM_386,
	"arm":     elf.EM_ARM,
	"ppc64le": elf.EM_PPC64,
	"riscv64": elf.EM_RISCV,
	"s390x":   elf.EM_S390,
}

// CheckArch says whether devata's image can be built for GOARCH arch.
func CheckArch(arch string) error {
	if _, ok := elfMachines[arch]; ok {
		return nil
	}
	known := make([]string, 0, len(elfMachines))
	for a := range elfMachines {
		known = append(known, a)
	}
	slices.Sort(known)
	return fmt.Errorf("image: GOARCH %q is not one devata's image is built for (%s)", arch, strings.Join(known, ", "))
}

// checkMachine refuses a binary built for another architecture than the
// image says (an index whose arm64 entry runs an amd64 binary would only
// fail on the node): it reads e_machine from the ELF header.
func checkMachine(path string, bin []byte, arch string) error {
	if err := CheckArch(arch); err != nil {
		return err
	}
	want := elfMachines[arch]
	if len(bin) < 20 {
		return fmt.Errorf("image: %s is too short for an ELF header", path)
	}
	var order binary.ByteOrder = binary.LittleEndian
	if elf.Data(bin[elf.EI_DATA]) == elf.ELFDATA2MSB {
		order = binary.BigEndian
	}
	if got := elf.Machine(order.Uint16(bin[18:20])); got != want {
		return fmt.Errorf("image: %s is built for %s, not %s (GOARCH %s): build it with GOARCH=%s (image.BuildBinary)", path, got, want, arch, arch)
	}
	return nil
}

func (s Spec) check() error {
	var missing []string
	for _, f := range []struct{ name, v string }{
		{"Binary", s.Binary}, {"Arch", s.Arch}, {"Version", s.Version}, {"Revision", s.Revision}, {"Source", s.Source},
	} {
		if f.v == "" {
			missing = append(missing, f.name)
		}
	}
	if s.Created.IsZero() {
		missing = append(missing, "Created")
	}
	if len(s.CABundle) == 0 {
		missing = append(missing, "CABundle")
	}
	if len(missing) > 0 {
		return fmt.Errorf("image: the spec lacks %s", strings.Join(missing, ", "))
	}
	if !bytes.Contains(s.CABundle, []byte("-----BEGIN CERTIFICATE-----")) {
		return errors.New("image: the CA bundle holds no PEM certificate")
	}
	return nil
}

// Labels are the OCI annotations the config carries. No licenses label:
// the repository names no licence yet.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "devata",
		"org.opencontainers.image.description": "devata: declarative Talos Linux fleets (reconcile, drift, backup)",
		"org.opencontainers.image.source":      s.Source,
		"org.opencontainers.image.version":     s.Version,
		"org.opencontainers.image.revision":    s.Revision,
		"org.opencontainers.image.created":     s.Created.UTC().Format(time.RFC3339),
	}
}

func (s Spec) config() v1.Config {
	env := []string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + Home,
		"SSL_CERT_FILE=" + CABundlePath,
	}
	if s.Zoneinfo != nil {
		env = append(env, "ZONEINFO="+ZoneinfoPath)
	}
	return v1.Config{
		Entrypoint: []string{BinaryPath},
		User:       User,
		WorkingDir: Home,
		Env:        env,
		Labels:     s.Labels(),
	}
}

// Passwd and Group are the base's /etc/passwd and /etc/group: root (so
// that uid 0 has a name), nobody and nonroot, as distroless has them.
const (
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	Group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
	// Go's resolver reads hosts before DNS only when nsswitch says so.
	NSSwitch = "hosts: files dns\n"
)

func (s Spec) baseFiles() []file {
	fs := []file{
		{name: "/etc", dir: true, mode: 0o755},
		{name: "/etc/passwd", mode: 0o644, data: []byte(Passwd)},
		{name: "/etc/group", mode: 0o644, data: []byte(Group)},
		{name: "/etc/nsswitch.conf", mode: 0o644, data: []byte(NSSwitch)},
		{name: "/etc/ssl", dir: true, mode: 0o755},
		{name: "/etc/ssl/certs", dir: true, mode: 0o755},
		{name: CABundlePath, mode: 0o644, data: s.CABundle},
		{name: "/home", dir: true, mode: 0o755},
		{name: Home, dir: true, mode: 0o700, uid: UID, gid: GID},
		{name: "/root", dir: true, mode: 0o700},
		{name: "/tmp", dir: true, mode: 0o1777},
	}
	if s.Zoneinfo != nil {
		fs = append(fs,
			file{name: "/usr", dir: true, mode: 0o755},
			file{name: "/usr/local", dir: true, mode: 0o755},
			file{name: "/usr/local/go", dir: true, mode: 0o755},
			file{name: "/usr/local/go/lib", dir: true, mode: 0o755},
			file{name: "/usr/local/go/lib/time", dir: true, mode: 0o755},
			file{name: ZoneinfoPath, mode: 0o644, data: s.Zoneinfo},
		)
	}
	return fs
}

type file struct {
	name     string // absolute path in the image
	dir      bool
	mode     int64 // permission bits and sticky/setuid/setgid as tar has them
	uid, gid int
	data     []byte
}

// layer writes files as a gzipped tar the same way every time: entries
// sorted by name, one mtime, numeric owners and no user or group names, no
// PAX records, and a gzip header with neither name nor time. Builds use the
// default level: BestCompression takes four times as long for 0.4% less.
func layer(mtime time.Time, level int, files []file) (v1.Layer, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b file) int { return strings.Compare(a.name, b.name) })
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, f := range files {
		h := &tar.Header{
			Name:    strings.TrimPrefix(f.name, "/"),
			Mode:    f.mode,
			Uid:     f.uid,
			Gid:     f.gid,
			ModTime: mtime,
			Format:  tar.FormatUSTAR,
		}
		if f.dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(f.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, fmt.Errorf("tar %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("tar: %w", err)
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, level)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(raw.Bytes()); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("gzip: %w", err)
	}
	blob := gz.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(blob)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// readBounded reads a file of at most limit bytes, and says so when it is
// larger rather than cutting it.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is larger than %d MiB", path, limit>>20)
	}
	return b, nil
}
