package redact

import (
	"fmt"
	"regexp"
	"strings"

	"gopkg.in/yaml.v3"
)

// DecodeError describes why a patch did not load without quoting the
// patch: machinery's "unknown keys found during decoding" error repeats
// the offending part of the document, values included, which for a
// misplaced file (a secrets bundle given as a patch) or a misspelled key
// beside a password would print secrets. Only the unknown keys' paths are
// kept; any other error keeps its first line, cut short.
func DecodeError(err error) string {
	msg := err.Error()
	const unknown = "unknown keys found during decoding:"
	// machinery 1.12.4 on puts "error decoding document <apiVersion>/<kind>/<name>
	// (line N): " before it (configloader's decoder.go parse): kept, it names
	// the document
	if context, rest, ok := strings.Cut(msg, unknown); ok {
		context = quotedValue.ReplaceAllString(strings.Join(strings.Fields(context), " "), "`…`")
		if context != "" {
			context += " "
		}
		var n yaml.Node
		if yaml.Unmarshal([]byte(rest), &n) == nil {
			var paths []string
			keyPaths(&n, "", &paths)
			if len(paths) > 0 {
				const show = 5
				more := ""
				if len(paths) > show {
					more = fmt.Sprintf(" and %d more", len(paths)-show)
					paths = paths[:show]
				}
				return fmt.Sprintf("%sunknown keys %s%s (misspelled or misplaced fields, or not a Talos config patch at all)", context, strings.Join(paths, ", "), more)
			}
		}
		return context + "unknown keys (misspelled or misplaced fields, or not a Talos config patch at all)"
	}
	// yaml.v3 quotes an offending scalar in backticks: keep the shape only
	line := quotedValue.ReplaceAllString(strings.Join(strings.Fields(msg), " "), "`…`")
	if len(line) > 240 {
		line = line[:240] + "…"
	}
	return line
}

var quotedValue = regexp.MustCompile("`[^`]*`")

// keyPaths collects the dotted paths of the leaves of a YAML mapping,
// never its values.
func keyPaths(n *yaml.Node, prefix string, out *[]string) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			keyPaths(c, prefix, out)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := joinKey(prefix, n.Content[i].Value)
			if v := n.Content[i+1]; v.Kind == yaml.MappingNode {
				keyPaths(v, p, out)
			} else {
				*out = append(*out, p)
			}
		}
	default:
		if prefix != "" {
			*out = append(*out, prefix)
		}
	}
}

func joinKey(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}
