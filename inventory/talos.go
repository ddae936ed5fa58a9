package inventory

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"devata.dev/devata/internal/talos"
)

// PatchDocument is one document of a patch file: its kind ("" for a
// v1alpha1 fragment) and the line it starts on.
type PatchDocument struct {
	Kind string
	Line int
}

// PatchDocuments lists the documents of a patch file, in order. It reads
// only each document's top-level kind; what does not parse as YAML is
// left to machinery's loader to report.
func PatchDocuments(data []byte) []PatchDocument {
	var out []PatchDocument
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) || err != nil {
			return out
		}
		doc := PatchDocument{Line: n.Line}
		if len(n.Content) == 1 && n.Content[0].Kind == yaml.MappingNode {
			m := n.Content[0]
			doc.Line = m.Line
			for i := 0; i+1 < len(m.Content); i += 2 {
				if m.Content[i].Value == "kind" {
					doc.Kind = m.Content[i+1].Value
				}
			}
		}
		out = append(out, doc)
	}
}

// NewerKindError is a patch document of a kind the contract's Talos does
// not know yet.
type NewerKindError struct {
	File  string
	Line  int
	Kind  string
	Since int // the Talos 1.x minor that introduced it
	Talos string
}

func (e *NewerKindError) Error() string {
	return fmt.Sprintf("%s:%d: document %s came with Talos 1.%d; Talos %s refuses a config holding it (%q %q: not registered): remove it, or write the setting as Talos %s does (a v1alpha1 field), or raise cluster.talosVersion once every machine runs 1.%d",
		e.File, e.Line, e.Kind, e.Since, e.Talos, e.Kind, "v1alpha1", e.Talos, e.Since)
}

// NewerKinds says, for the documents of one patch file that its Talos
// refuses, which they are and what to do.
func NewerKinds(errs []*NewerKindError) string {
	if len(errs) == 1 {
		return errs[0].Error()
	}
	e := errs[0]
	names := make([]string, len(errs))
	since := 0
	for i, x := range errs {
		names[i] = fmt.Sprintf("%s (line %d, Talos 1.%d)", x.Kind, x.Line, x.Since)
		since = max(since, x.Since)
	}
	return fmt.Sprintf("%s: %d documents came with a later Talos than %s, which refuses a config holding them (not registered): %s; remove them, or write the settings as Talos %s does (v1alpha1 fields), or raise cluster.talosVersion once every machine runs 1.%d",
		e.File, len(errs), e.Talos, strings.Join(names, ", "), e.Talos, since)
}

// CheckPatchKinds refuses each document of patch file (its data) that
// Talos version talosVersion does not know.
func CheckPatchKinds(file string, data []byte, talosVersion string) []*NewerKindError {
	minor, ok := talos.Minor(talosVersion)
	if !ok {
		return nil
	}
	var out []*NewerKindError
	for _, d := range PatchDocuments(data) {
		if since, known := talos.DocumentKinds[d.Kind]; known && since > minor {
			out = append(out, &NewerKindError{File: file, Line: d.Line, Kind: d.Kind, Since: since, Talos: talosVersion})
		}
	}
	return out
}
