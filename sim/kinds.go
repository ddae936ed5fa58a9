package sim

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"

	"github.com/blang/semver/v4"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/internal/talos"
)

// notRegistered is the error a machine of version gives for the first
// document of data whose kind its machinery does not register, or nil.
// machinery v1.14.1, which the sim is built on, registers every kind up to
// Talos 1.14; each release registers only its own (internal/talos
// DocumentKinds, read in each release's config/types registrations), and
// its configloader refuses the rest (config/internal/registry New:
// `"<Kind>" "<apiVersion>": not registered`). From machinery v1.12.4 the
// decoder names the document (configloader/internal/decoder decoder.go
// parse: "error decoding document <apiVersion>/<kind>/<name> (line N): …");
// v1.11.0 and v1.12.1 return it bare.
func notRegistered(data []byte, version string) error {
	minor, ok := talos.Minor(version)
	if !ok {
		return nil
	}

	wraps := true
	if v, err := semver.ParseTolerant(version); err == nil {
		wraps = v.GTE(semver.MustParse("1.12.4"))
	}

	dec := yaml.NewDecoder(bytes.NewReader(data))

	for {
		var doc yaml.Node

		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) || err != nil {
			return nil // what does not parse is configloader's to report
		}

		if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
			continue
		}

		m := doc.Content[0]
		field := func(key string) string {
			for i := 0; i+1 < len(m.Content); i += 2 {
				if m.Content[i].Value == key {
					return m.Content[i+1].Value
				}
			}

			return ""
		}

		// the table dates kinds from 1.11 on: what 1.11 registers, an
		// older machine may or may not (it is not played per kind)
		kind, apiVersion := cmp.Or(field("kind"), "v1alpha1"), field("apiVersion")
		if since, known := talos.DocumentKinds[kind]; !known || since <= max(minor, talos.OldestMinor) {
			continue
		}

		err = fmt.Errorf("%q %q: not registered", kind, apiVersion)
		if wraps {
			err = fmt.Errorf("error decoding document %s/%s/%s (line %d): %w", apiVersion, kind, field("name"), m.Line, err)
		}

		return err
	}
}
