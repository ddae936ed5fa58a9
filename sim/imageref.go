package sim

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// An installer image reference as containerd's image.Pull reads it
// (internal/pkg/containers/image/image.go Pull: reference.ParseDockerRef).
// The grammar, normalization and error texts are those of
// github.com/distribution/reference v0.6.0 (regexp.go, normalize.go
// ParseNormalizedNamed and ParseDockerRef, reference.go Parse) and of
// go-digest v1.0.0 (Digest.Validate), which the sim does not depend on.

const (
	refAlphanumeric  = `[a-z0-9]+`
	refSeparator     = `(?:[._]|__|[-]+)`
	refDomainPart    = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
	refTag           = `[\w][\w.-]{0,127}`
	refDigest        = `[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*[:][[:xdigit:]]{32,}`
	refPathComponent = refAlphanumeric + `(?:` + refSeparator + refAlphanumeric + `)*`
	refRemoteName    = refPathComponent + `(?:/` + refPathComponent + `)*`
	refHost          = `(?:` + refDomainPart + `(?:\.` + refDomainPart + `)*` + `|\[(?:[a-fA-F0-9:]+)\])`
	refDomainAndPort = refHost + `(?::[0-9]+)?`
	refName          = `(?:` + refDomainAndPort + `/)?` + refRemoteName
	refNameMaxLength = 255
)

var (
	referenceRegexp  = regexp.MustCompile(`^(` + refName + `)(?::(` + refTag + `))?(?:@(` + refDigest + `))?$`)
	anchoredName     = regexp.MustCompile(`^(?:(` + refDomainAndPort + `)/)?(` + refRemoteName + `)$`)
	anchoredID       = regexp.MustCompile(`^[a-f0-9]{64}$`)
	anchoredDigest   = regexp.MustCompile(`^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$`)
	digestHexLengths = map[string]int{"sha256": 64, "sha384": 96, "sha512": 128}
	lowerHex         = regexp.MustCompile(`^[a-f0-9]+$`)
)

// imageRef is a parsed, normalized reference.
type imageRef struct {
	repository string // domain/path, e.g. docker.io/library/alpine
	tag        string // as written; ParseDockerRef drops it when a digest is given
	digest     string
}

// String is the reference as ParseDockerRef normalizes it: a digest wins
// over a tag, a bare name is tagged latest.
func (r imageRef) String() string {
	switch {
	case r.digest != "":
		return r.repository + "@" + r.digest
	case r.tag != "":
		return r.repository + ":" + r.tag
	default:
		return r.repository + ":latest"
	}
}

// parseDockerRef parses ref as reference.ParseDockerRef does, with its
// errors.
func parseDockerRef(ref string) (imageRef, error) {
	if anchoredID.MatchString(ref) {
		return imageRef{}, fmt.Errorf("invalid repository name (%s), cannot specify 64-byte hexadecimal strings", ref)
	}

	domain, remainder := splitDockerDomain(ref)

	remote := remainder
	if i := strings.IndexRune(remainder, ':'); i > -1 {
		remote = remainder[:i]
	}

	if strings.ToLower(remote) != remote {
		return imageRef{}, fmt.Errorf("invalid reference format: repository name (%s) must be lowercase", remote)
	}

	s := domain + "/" + remainder

	m := referenceRegexp.FindStringSubmatch(s)
	if m == nil {
		if referenceRegexp.MatchString(strings.ToLower(s)) {
			return imageRef{}, errors.New("repository name must be lowercase")
		}

		return imageRef{}, errors.New("invalid reference format")
	}

	name := anchoredName.FindStringSubmatch(m[1])
	if len(name) == 3 && len(name[2]) > refNameMaxLength {
		return imageRef{}, fmt.Errorf("repository name must not be more than %d characters", refNameMaxLength)
	}

	if m[3] != "" {
		if err := validateDigest(m[3]); err != nil {
			return imageRef{}, err
		}
	}

	return imageRef{repository: m[1], tag: m[2], digest: m[3]}, nil
}

// splitDockerDomain: a first component with a dot or a port, localhost or
// an upper-case letter is a registry; anything else is on Docker Hub, and
// a single component there is an official image (library/).
func splitDockerDomain(name string) (domain, remainder string) {
	first, rest, ok := strings.Cut(name, "/")
	if !ok {
		return "docker.io", "library/" + name
	}

	switch {
	case first == "localhost", strings.ContainsAny(first, ".:"), strings.ToLower(first) != first:
		domain, remainder = first, rest
	default:
		domain, remainder = "docker.io", name
	}

	if first == "index.docker.io" {
		domain = "docker.io"
	}

	if domain == "docker.io" && !strings.ContainsRune(remainder, '/') {
		remainder = "library/" + remainder
	}

	return domain, remainder
}

// validateDigest is go-digest's Digest.Validate.
func validateDigest(d string) error {
	i := strings.Index(d, ":")
	if i <= 0 || i+1 == len(d) {
		return errors.New("invalid checksum digest format")
	}

	want, ok := digestHexLengths[d[:i]]

	switch {
	case !ok && !anchoredDigest.MatchString(d):
		return errors.New("invalid checksum digest format")
	case !ok:
		return errors.New("unsupported digest algorithm")
	case len(d[i+1:]) != want:
		return errors.New("invalid checksum digest length")
	case !lowerHex.MatchString(d[i+1:]):
		return errors.New("invalid checksum digest format")
	}

	return nil
}
