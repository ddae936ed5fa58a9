package image_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/x509"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"devata.dev/devata/internal/image"
)

const testVersion = "v0.0.0-imagetest"

// One build of the binary for every test: it is the slow part.
var built struct {
	path string
	err  error
	done bool
}

func devataBinary(t *testing.T) string {
	t.Helper()
	if !built.done {
		built.done = true
		dir, err := os.MkdirTemp("", "devata-image-test-")
		if err != nil {
			t.Fatal(err)
		}
		built.path = filepath.Join(dir, "devata")
		var out bytes.Buffer
		if err := image.BuildBinary(context.Background(), "", built.path, runtime.GOARCH, testVersion, &out); err != nil {
			built.err = err
			t.Logf("go build output:\n%s", out.String())
		}
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

// The devata image, built once from spec(t) for the tests that only read it.
var shared struct {
	img  v1.Image
	done bool
}

func devataImage(t *testing.T) (image.Spec, v1.Image) {
	t.Helper()
	s := spec(t)
	if !shared.done {
		shared.done = true
		img, err := image.Build(s)
		if err != nil {
			t.Fatal(err)
		}
		shared.img = img
	}
	if shared.img == nil {
		t.Fatal("building the devata image failed in an earlier test")
	}
	return s, shared.img
}

func TestMain(m *testing.M) {
	code := m.Run()
	for _, p := range []string{built.path, crossBuilt.path} {
		if p != "" {
			os.RemoveAll(filepath.Dir(p))
		}
	}
	os.Exit(code)
}

// otherArch is the index's second architecture: arm64, or amd64 on an
// arm64 machine.
func otherArch() string {
	if runtime.GOARCH == "arm64" {
		return "amd64"
	}
	return "arm64"
}

// One cross build of devata for otherArch, for every index test. It is the
// most expensive step of this package's tests (minutes on two cores with a
// cold build cache; the cache serves every later run).
var crossBuilt struct {
	path string
	err  error
	done bool
}

func crossBinary(t *testing.T) string {
	t.Helper()
	if !crossBuilt.done {
		crossBuilt.done = true
		dir, err := os.MkdirTemp("", "devata-image-test-")
		if err != nil {
			t.Fatal(err)
		}
		crossBuilt.path = filepath.Join(dir, "devata")
		var out bytes.Buffer
		if err := image.BuildBinary(context.Background(), "", crossBuilt.path, otherArch(), testVersion, &out); err != nil {
			crossBuilt.err = err
			t.Logf("go build output:\n%s", out.String())
		}
	}
	if crossBuilt.err != nil {
		t.Fatal(crossBuilt.err)
	}
	return crossBuilt.path
}

// standIn writes the ELF header of a binary for arch and nothing else: a
// file Build takes as that binary, cheap to pack.
func standIn(t *testing.T, arch string) string {
	t.Helper()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS], h[elf.EI_DATA], h[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint16(h[16:], uint16(elf.ET_EXEC))
	binary.LittleEndian.PutUint16(h[18:], uint16(machines[arch]))
	path := filepath.Join(t.TempDir(), "devata")
	if err := os.WriteFile(path, h, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

func spec(t *testing.T) image.Spec {
	zi, err := image.GoZoneinfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return image.Spec{
		Binary:   devataBinary(t),
		Arch:     runtime.GOARCH,
		Version:  testVersion,
		Revision: "0123456789abcdef0123456789abcdef01234567",
		Source:   image.DefaultSource,
		Created:  time.Unix(1700000000, 0),
		CABundle: image.FallbackCABundle(),
		Zoneinfo: zi,
		Store:    true,
	}
}

// The image written as a layout and read back: its config runs /devata as
// nonroot with the labels, its layers hold what the base promises with
// fixed owners and times, and the /devata in it runs and prints the version
// it was stamped with.
func TestImageFromLayout(t *testing.T) {
	s, img := devataImage(t)
	dir := filepath.Join(t.TempDir(), "oci")
	if err := image.WriteLayout(dir, img, testVersion); err != nil {
		t.Fatal(err)
	}

	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatalf("read the layout back: %v", err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(im.Manifests) != 1 {
		t.Fatalf("layout has %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if got := desc.Annotations["org.opencontainers.image.ref.name"]; got != testVersion {
		t.Errorf("ref.name = %q, want %q", got, testVersion)
	}
	if desc.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest media type %s, want %s", desc.MediaType, types.OCIManifestSchema1)
	}
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := p.Image(desc.Digest)
	if err != nil {
		t.Fatalf("image %s from the layout: %v", desc.Digest, err)
	}

	cf, err := loaded.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s, want linux/%s", cf.OS, cf.Architecture, runtime.GOARCH)
	}
	if !slices.Equal(cf.Config.Entrypoint, []string{"/devata"}) {
		t.Errorf("entrypoint %q, want [/devata]", cf.Config.Entrypoint)
	}
	if u := cf.Config.User; u != "65532:65532" {
		t.Errorf("user %q, want 65532:65532 (nonroot)", u)
	}
	if cf.Config.WorkingDir != "/home/nonroot" {
		t.Errorf("working dir %q, want /home/nonroot", cf.Config.WorkingDir)
	}
	if !cf.Created.Equal(s.Created) {
		t.Errorf("created %s, want %s", cf.Created, s.Created)
	}
	wantLabels := map[string]string{
		"org.opencontainers.image.title":    "devata",
		"org.opencontainers.image.source":   image.DefaultSource,
		"org.opencontainers.image.version":  testVersion,
		"org.opencontainers.image.revision": s.Revision,
		"org.opencontainers.image.created":  "2023-11-14T22:13:20Z",
	}
	for k, want := range wantLabels {
		if got := cf.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	secretish := regexp.MustCompile(`(?i)secret|token|passw|key|credential|auth`)
	for _, e := range cf.Config.Env {
		if name, _, _ := strings.Cut(e, "="); secretish.MatchString(name) {
			t.Errorf("env %s looks like a secret: the image carries none", name)
		}
	}
	if !slices.Contains(cf.Config.Env, "SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt") {
		t.Errorf("env %q lacks SSL_CERT_FILE", cf.Config.Env)
	}

	files := layerFiles(t, loaded, s.Created)
	bin, ok := files["devata"]
	if !ok {
		t.Fatalf("no /devata in the layers; have %v", keys(files))
	}
	if bin.hdr.Typeflag != tar.TypeReg || bin.hdr.Mode != 0o755 || bin.hdr.Uid != 0 || bin.hdr.Gid != 0 {
		t.Errorf("/devata: type %c mode %o owner %d:%d, want a regular file 0755 owned by 0:0", bin.hdr.Typeflag, bin.hdr.Mode, bin.hdr.Uid, bin.hdr.Gid)
	}
	if passwd := string(files["etc/passwd"].data); !strings.Contains(passwd, "\nnonroot:x:65532:65532:") {
		t.Errorf("/etc/passwd names no nonroot 65532:\n%s", passwd)
	}
	if group := string(files["etc/group"].data); !strings.Contains(group, "\nnonroot:x:65532:") {
		t.Errorf("/etc/group names no nonroot 65532:\n%s", group)
	}
	if tmp := files["tmp/"]; tmp.hdr == nil || tmp.hdr.Typeflag != tar.TypeDir || tmp.hdr.Mode != 0o1777 {
		t.Errorf("/tmp: %+v, want a directory 1777", tmp.hdr)
	}
	if home := files["home/nonroot/"]; home.hdr == nil || home.hdr.Uid != 65532 || home.hdr.Gid != 65532 {
		t.Errorf("/home/nonroot: %+v, want a directory owned by 65532:65532", home.hdr)
	}
	if ns := string(files["etc/nsswitch.conf"].data); !strings.Contains(ns, "hosts: files dns") {
		t.Errorf("/etc/nsswitch.conf = %q", ns)
	}
	if ca := files["etc/ssl/certs/ca-certificates.crt"].data; !bytes.Equal(ca, s.CABundle) {
		t.Errorf("the image's CA bundle (%d bytes) is not the one given (%d bytes)", len(ca), len(s.CABundle))
	}
	if zi := files["usr/local/go/lib/time/zoneinfo.zip"].data; !bytes.Equal(zi, s.Zoneinfo) {
		t.Errorf("the image's zoneinfo.zip (%d bytes) is not Go's (%d bytes)", len(zi), len(s.Zoneinfo))
	}

	// Run the binary that came out of the layer.
	exe := filepath.Join(t.TempDir(), "devata")
	if err := os.WriteFile(exe, bin.data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(exe, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("/devata version from the image: %v\n%s", err, out)
	}
	if want := "devata " + testVersion + " ("; !strings.HasPrefix(string(out), want) {
		t.Errorf("/devata version printed %q, want it to start %q", out, want)
	}
}

// The same spec gives the same digest, so a rebuild from the same commit
// can be checked against the pushed image; a changed input changes it.
func TestImageReproducible(t *testing.T) {
	s, img := devataImage(t)
	digest := func(img v1.Image) v1.Hash {
		t.Helper()
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	build := func(s image.Spec) v1.Image {
		t.Helper()
		img, err := image.Build(s)
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	if first, second := digest(img), digest(build(s)); first != second {
		t.Errorf("two builds of one spec: %s and %s", first, second)
	}

	// What changes: a stand-in ELF file keeps these builds cheap.
	small := s
	small.Binary = standIn(t, s.Arch)
	base := digest(build(small))
	later := small
	later.Created = small.Created.Add(time.Second)
	other := small
	other.Revision = strings.Repeat("f", 40)
	for name, changed := range map[string]image.Spec{"a later Created": later, "another Revision": other} {
		if d := digest(build(changed)); d == base {
			t.Errorf("%s gave the same digest %s", name, d)
		}
	}
	// Compressed as task image builds it: still one digest, not the stored one.
	packed := small
	packed.Store = false
	if a, b := digest(build(packed)), digest(build(packed)); a != b || a == base {
		t.Errorf("compressed builds: %s and %s (stored: %s), want two equal digests unlike the stored one", a, b, base)
	}
}

// The docker tarball carries the tag and the same config as the layout.
func TestTarball(t *testing.T) {
	_, img := devataImage(t)
	path := filepath.Join(t.TempDir(), "devata.tar")
	if err := image.WriteTarball(path, img, "devata:"+testVersion); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == "manifest.json" {
			if err := json.NewDecoder(tr).Decode(&manifest); err != nil {
				t.Fatal(err)
			}
		}
	}
	cfg, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	if len(manifest) != 1 || !slices.Equal(manifest[0].RepoTags, []string{"devata:" + testVersion}) || manifest[0].Config != cfg.String() || len(manifest[0].Layers) != 2 {
		t.Errorf("manifest.json = %+v, want one image tagged devata:%s with config %s and 2 layers", manifest, testVersion, cfg)
	}
}

func TestFallbackCABundle(t *testing.T) {
	b := image.FallbackCABundle()
	n := 0
	for rest := b; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if _, err := x509.ParseCertificate(blk.Bytes); err != nil {
			t.Fatalf("certificate %d: %v", n, err)
		}
		n++
	}
	if n < 100 {
		t.Errorf("%d roots, want the NSS set (over 100)", n)
	}
}

func TestWriteLayoutRefusesOtherDirectories(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	err := image.WriteLayout(dir, nil, testVersion)
	if err == nil || !strings.Contains(err.Error(), "holds no OCI layout") {
		t.Fatalf("WriteLayout into a directory with other files: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "notes.txt")); err != nil {
		t.Errorf("the file in the directory is gone: %v", err)
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.1.0": true, "1646aa5-dirty": true, "dev": true,
		"": false, "v1.0.0+build": false, "-x": false, "a b": false, `v1" -X main.x=y`: false,
	} {
		if err := image.CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func TestReadStampSourceDateEpoch(t *testing.T) {
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	st, err := image.ReadStamp(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Created.Equal(time.Unix(1700000000, 0)) || st.CreatedFrom != "SOURCE_DATE_EPOCH" {
		t.Errorf("created %s from %q, want 2023-11-14T22:13:20Z from SOURCE_DATE_EPOCH", st.Created, st.CreatedFrom)
	}
	if st.Version == "" || st.Revision == "" || st.Source == "" {
		t.Errorf("stamp %+v has an empty field", st)
	}

	t.Setenv("SOURCE_DATE_EPOCH", "yesterday")
	if _, err := image.ReadStamp(context.Background(), ""); err == nil || !strings.Contains(err.Error(), "SOURCE_DATE_EPOCH") {
		t.Errorf("SOURCE_DATE_EPOCH=yesterday: %v, want an error naming it", err)
	}
}

type entry struct {
	hdr  *tar.Header
	data []byte
}

// layerFiles reads every layer, checking on the way that entries are
// sorted, stamped with mtime and carry no owner names.
func layerFiles(t *testing.T, img v1.Image, mtime time.Time) map[string]entry {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Errorf("%d layers, want 2 (base, devata)", len(layers))
	}
	files := map[string]entry{}
	for i, l := range layers {
		if mt, _ := l.MediaType(); mt != types.OCILayer {
			t.Errorf("layer %d media type %s, want %s", i, mt, types.OCILayer)
		}
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("layer %d: %v", i, err)
			}
			if h.Name < prev {
				t.Errorf("layer %d: %s after %s: entries not sorted", i, h.Name, prev)
			}
			prev = h.Name
			if !h.ModTime.Equal(mtime) || h.Uname != "" || h.Gname != "" {
				t.Errorf("layer %d: %s has mtime %s owner names %q:%q, want %s and none", i, h.Name, h.ModTime, h.Uname, h.Gname, mtime)
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = entry{hdr: h, data: data}
		}
		rc.Close()
	}
	return files
}

func keys(m map[string]entry) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// The index holds one image per architecture, each the image Build makes
// for that architecture alone, with its platform; each image's /devata is
// an ELF binary for its platform, stamped with the version. The same specs,
// in any order, give the same index digest; written as a layout, the index
// is its one entry, named by the version, and reads back whole.
func TestImageIndex(t *testing.T) {
	s, host := devataImage(t)
	other := s
	other.Arch, other.Binary = otherArch(), crossBinary(t)
	idx, images, err := image.BuildIndex([]image.Spec{other, s})
	if err != nil {
		t.Fatal(err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if mt, _ := idx.MediaType(); mt != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", mt, types.OCIImageIndex)
	}
	arches := []string{"amd64", "arm64"}
	if len(im.Manifests) != 2 || len(images) != 2 {
		t.Fatalf("index of %d manifests (%d images), want 2", len(im.Manifests), len(images))
	}
	alone := map[string]v1.Hash{}
	alone[runtime.GOARCH], _ = host.Digest()
	otherImg, err := image.Build(other)
	if err != nil {
		t.Fatal(err)
	}
	alone[other.Arch], _ = otherImg.Digest()
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}
	for i, d := range im.Manifests {
		arch := arches[i]
		if d.Platform == nil || d.Platform.OS != "linux" || d.Platform.Architecture != arch || d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("entry %d: platform %+v, media type %s; want linux/%s, %s", i, d.Platform, d.MediaType, arch, types.OCIManifestSchema1)
		}
		if d.Digest != alone[arch] {
			t.Errorf("linux/%s in the index is %s, the image built alone %s", arch, d.Digest, alone[arch])
		}
		cf, err := images[i].ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch {
			t.Errorf("linux/%s's config says %s/%s", arch, cf.OS, cf.Architecture)
		}
		bin := layerFiles(t, images[i], s.Created)["devata"].data
		f, err := elf.NewFile(bytes.NewReader(bin))
		if err != nil {
			t.Fatalf("linux/%s's /devata: %v", arch, err)
		}
		if f.Machine != machines[arch] || f.Class != elf.ELFCLASS64 {
			t.Errorf("linux/%s's /devata is %s %s, want %s", arch, f.Class, f.Machine, machines[arch])
		}
		if !bytes.Contains(bin, []byte(testVersion)) {
			t.Errorf("linux/%s's /devata is not stamped %s", arch, testVersion)
		}
	}
	for k, want := range map[string]string{"org.opencontainers.image.version": testVersion, "org.opencontainers.image.revision": s.Revision, "org.opencontainers.image.created": "2023-11-14T22:13:20Z"} {
		if got := im.Annotations[k]; got != want {
			t.Errorf("index annotation %s = %q, want %q", k, got, want)
		}
	}

	digest, err := idx.Digest()
	if err != nil {
		t.Fatal(err)
	}
	again, _, err := image.BuildIndex([]image.Spec{s, other})
	if err != nil {
		t.Fatal(err)
	}
	if d, _ := again.Digest(); d != digest {
		t.Errorf("the same specs in another order: index %s, then %s", digest, d)
	}

	dir := filepath.Join(t.TempDir(), "oci")
	if err := image.WriteIndexLayout(dir, idx, testVersion); err != nil {
		t.Fatal(err)
	}
	top, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, err := top.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(tm.Manifests) != 1 || tm.Manifests[0].Digest != digest || tm.Manifests[0].MediaType != types.OCIImageIndex || tm.Manifests[0].Annotations["org.opencontainers.image.ref.name"] != testVersion {
		t.Fatalf("the layout's index.json = %+v, want the one index %s named %s", tm.Manifests, digest, testVersion)
	}
	loaded, err := top.ImageIndex(digest)
	if err != nil {
		t.Fatal(err)
	}
	if err := validate.Index(loaded); err != nil {
		t.Errorf("the index read back from the layout: %v", err)
	}
}

// An image is refused when its binary is for another architecture than it
// says, and an index when two images share a platform or differ in what
// they must share.
func TestImageIndexRefuses(t *testing.T) {
	s := spec(t)
	s.Binary = standIn(t, runtime.GOARCH)
	wrong := s
	wrong.Arch = otherArch()
	if _, err := image.Build(wrong); err == nil || !strings.Contains(err.Error(), "is built for") || !strings.Contains(err.Error(), "GOARCH="+otherArch()) {
		t.Errorf("a %s binary as linux/%s: %v", runtime.GOARCH, otherArch(), err)
	}
	if _, _, err := image.BuildIndex([]image.Spec{s, wrong}); err == nil || !strings.Contains(err.Error(), "linux/"+otherArch()) {
		t.Errorf("an index with a %s binary as linux/%s: %v", runtime.GOARCH, otherArch(), err)
	}
	if _, _, err := image.BuildIndex([]image.Spec{s, s}); err == nil || !strings.Contains(err.Error(), "two images for linux/"+runtime.GOARCH) {
		t.Errorf("two images of one platform: %v", err)
	}
	other := s
	other.Arch, other.Binary, other.Revision = otherArch(), standIn(t, otherArch()), strings.Repeat("f", 40)
	if _, _, err := image.BuildIndex([]image.Spec{s, other}); err == nil || !strings.Contains(err.Error(), "must share") {
		t.Errorf("images of two revisions: %v", err)
	}
	if err := image.CheckArch("mips"); err == nil || !strings.Contains(err.Error(), "amd64") || !strings.Contains(err.Error(), "arm64") {
		t.Errorf("CheckArch(mips): %v", err)
	}
}
