package talosapi

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"strings"

	"devata.dev/devata/redact"
	"github.com/hexops/gotextdiff"
	"github.com/hexops/gotextdiff/myers"
	"github.com/hexops/gotextdiff/span"
)

// ConfigDiff is the difference between an applied and a desired machine
// config, safe to show: Text is a unified diff of the redacted documents and
// secrets appear only as the paths of those that changed. Changes says the
// same as Text by YAML path, one line per changed value
// ("machine.network.hostname: "a" → "b""), at most 50 and then a count; it
// is made from the same redacted documents, so a secret shows as
// redact.Redacted there too.
type ConfigDiff struct {
	Equal          bool
	Text           string
	Changes        []string
	ChangedSecrets []string
	// MovedSecrets are secrets whose value is unchanged at another path
	// ("old → new"), as when a config of a newer Talos holds a setting in
	// a document of its own: not counted as changed.
	MovedSecrets []string
}

// secretChanges compares two configs' secrets by hash per field path: the
// paths whose secret changed, appeared or went, and the secrets that only
// moved (a path gone and a path new with the same value, "old → new").
func secretChanges(active, desired map[string][32]byte) (changed, moved []string) {
	gone := map[[32]byte][]string{}
	for _, path := range slices.Sorted(maps.Keys(active)) {
		if _, ok := desired[path]; !ok {
			gone[active[path]] = append(gone[active[path]], path)
		}
	}
	taken := map[string]bool{}
	for _, path := range slices.Sorted(maps.Keys(desired)) {
		h := desired[path]
		old, ok := active[path]
		switch {
		case ok && old == h:
		case ok:
			changed = append(changed, path)
		case len(gone[h]) > 0:
			moved = append(moved, gone[h][0]+" → "+path)
			taken[gone[h][0]] = true
			gone[h] = gone[h][1:]
		default:
			changed = append(changed, path)
		}
	}
	for _, path := range slices.Sorted(maps.Keys(active)) {
		if _, ok := desired[path]; !ok && !taken[path] {
			changed = append(changed, path)
		}
	}
	slices.Sort(changed)
	return changed, moved
}

// DiffConfigs compares the applied config with the desired one. Byte-equal
// configs are equal without parsing; otherwise both are redacted (machinery's
// RedactSecrets and what it misses) and diffed as YAML, and secrets are
// compared by hash per field path.
func DiffConfigs(active, desired []byte) (ConfigDiff, error) {
	if bytes.Equal(active, desired) {
		return ConfigDiff{Equal: true}, nil
	}
	redActive, hashActive, err := redact.Config(active)
	if err != nil {
		return ConfigDiff{}, fmt.Errorf("applied config: %w", err)
	}
	redDesired, hashDesired, err := redact.Config(desired)
	if err != nil {
		return ConfigDiff{}, fmt.Errorf("desired config: %w", err)
	}
	changed, moved := secretChanges(hashActive, hashDesired)
	d := ConfigDiff{ChangedSecrets: changed, MovedSecrets: moved}
	if !bytes.Equal(redActive, redDesired) {
		edits := myers.ComputeEdits(span.URIFromPath("applied"), string(redActive), string(redDesired))
		d.Text = fmt.Sprint(gotextdiff.ToUnified("applied", "desired", string(redActive), edits))
		if d.Changes, err = pathChanges(redActive, redDesired, maxChanges); err != nil {
			return ConfigDiff{}, fmt.Errorf("compare redacted configs: %w", err)
		}
	}
	d.Equal = d.Text == "" && len(changed) == 0 && len(moved) == 0
	return d, nil
}

// Summary is a one-line description of a diff, e.g. "3 lines changed, 1 secret changed".
func (d ConfigDiff) Summary() string {
	if d.Equal {
		return "no changes"
	}
	var parts []string
	if d.Text != "" {
		var add, del int
		for _, line := range strings.Split(d.Text, "\n") {
			switch {
			case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
			case strings.HasPrefix(line, "+"):
				add++
			case strings.HasPrefix(line, "-"):
				del++
			}
		}
		parts = append(parts, fmt.Sprintf("+%d -%d lines", add, del))
	}
	if n := len(d.ChangedSecrets); n > 0 {
		parts = append(parts, fmt.Sprintf("%d %s changed (%s)", n, pluralize(n, "secret", "secrets"), strings.Join(d.ChangedSecrets, ", ")))
	}
	if n := len(d.MovedSecrets); n > 0 {
		parts = append(parts, fmt.Sprintf("%d %s moved unchanged (%s)", n, pluralize(n, "secret", "secrets"), strings.Join(d.MovedSecrets, ", ")))
	}
	return strings.Join(parts, ", ")
}

func pluralize(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
