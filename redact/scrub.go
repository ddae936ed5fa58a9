package redact

import (
	"cmp"
	"encoding/base64"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Scrubber removes a config's secrets from text a Talos machine answered
// about that config. machined's ApplyConfiguration (dry run or not) quotes
// the config in its errors: machinery's validation quotes values (a
// WireGuard key of the wrong length, whole), the decoder's "unknown keys"
// error dumps the part of the document it did not know, and a change that
// cannot be applied immediately (no-reboot, try) comes back with an
// unredacted diff of the running config against the new one. Every such
// text passes through Scrub before anyone sees it.
type Scrubber struct {
	r *strings.Replacer
}

// Secrets shorter than these are not scrubbed by value: replacing a
// two-letter string everywhere would garble the message and hide nothing.
// URL credentials are scrubbed whatever their length (credentials).
const (
	minSecret     = 4
	minSecretLine = 12 // a line of a multi-line secret (a manifest, a PEM key)
)

// NewScrubber collects the secret values of configs: whatever Config
// hides (secret fields, machine.env values, URL credentials, what
// machinery's RedactSecrets marks), as written, quoted as Go's %q quotes
// it, query-unescaped, line by line for multi-line values, and decoded for base64 ones (the
// PEM keys). A config that does not load still gives every value the walk
// finds by field name.
func NewScrubber(configs ...[]byte) *Scrubber {
	seen := map[string]bool{}
	var secrets []string
	add := func(v string, minLen int) {
		if len(v) >= minLen && !seen[v] && v != Redacted {
			seen[v] = true
			secrets = append(secrets, v)
		}
	}
	addValue := func(v string) {
		add(v, minSecret)
		if q := strconv.Quote(v); q[1:len(q)-1] != v {
			add(q[1:len(q)-1], minSecret)
		}
		if u, err := url.QueryUnescape(v); err == nil && u != v {
			add(u, minSecret) // a query value, as a server would print it
		}
		var lines []string
		if strings.Contains(v, "\n") {
			lines = strings.Split(v, "\n")
		}
		if len(v) >= 16 {
			if dec, err := base64.StdEncoding.DecodeString(v); err == nil && utf8.Valid(dec) {
				add(string(dec), minSecret)
				lines = append(lines, strings.Split(string(dec), "\n")...)
			}
		}
		for _, l := range lines {
			add(strings.TrimSpace(l), minSecretLine)
		}
	}
	for _, data := range configs {
		for _, v := range configSecrets(data) {
			addValue(v)
		}
	}
	// longest first: a secret that holds another is replaced whole
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	pairs := make([]string, 0, 2*len(secrets))
	for _, v := range secrets {
		pairs = append(pairs, v, Redacted)
	}
	return &Scrubber{r: strings.NewReplacer(pairs...)}
}

// configSecrets returns the secret parts of data's values: a whole value
// for a secret field, the replaced parts of a value that only holds
// credentials (a URL's userinfo or query).
func configSecrets(data []byte) []string {
	var out []string
	_ = eachDoc(data, func(doc *yaml.Node, prefix string) {
		type touched struct {
			n    *yaml.Node
			orig string
		}
		var nodes []touched
		redactNode(doc, prefix, false, func(_ string, n *yaml.Node) { nodes = append(nodes, touched{n, n.Value}) })
		// redactNode has now replaced each node's value by its redacted form
		for _, t := range nodes {
			out = append(out, replacedParts(t.orig, t.n.Value)...)
		}
	})
	if enc, err := machineryRedact(data); err == nil {
		marked := map[string]string{}
		_ = scalars(enc, func(path, v string) {
			if machineryRedacted(v) {
				marked[path] = strings.ReplaceAll(v, url.QueryEscape(Redacted), Redacted)
			}
		})
		_ = scalars(data, func(path, v string) {
			if red, ok := marked[path]; ok {
				out = append(out, replacedParts(v, red)...)
			}
		})
	}
	return out
}

// replacedParts returns what of orig the markers in red stand for: red is
// orig with some parts replaced by Redacted. When red does not line up
// with orig, all of orig.
func replacedParts(orig, red string) []string {
	lits := strings.Split(red, Redacted)
	if len(lits) == 1 {
		return nil
	}
	rest, ok := strings.CutPrefix(orig, lits[0])
	if !ok {
		return []string{orig}
	}
	var out []string
	for i, lit := range lits[1:] {
		j := strings.Index(rest, lit)
		if i == len(lits)-2 { // the last literal ends the value
			j = len(rest) - len(lit)
			if j < 0 || !strings.HasSuffix(rest, lit) {
				return []string{orig}
			}
		}
		if j < 0 {
			return []string{orig}
		}
		if rest[:j] != "" {
			out = append(out, rest[:j])
		}
		rest = rest[j+len(lit):]
	}
	return out
}

// Talos' shapes of error text that quote configs wholesale.
const (
	// CanApplyImmediate (v1alpha1_runtime.go): "…can't be applied in
	// immediate mode\ndiff:\n<configdiff of running vs new>"
	immediateDiff = "\ndiff:\n"
	// gen's xyaml (the config decoder): "unknown keys found during
	// decoding:\n<the unknown part of the document, values included>"
	unknownKeys = "unknown keys found during decoding:"
	// maxScrubbed bounds the text kept
	maxScrubbed = 4096
)

// Scrub returns text with the config's secrets, any URL credentials, a
// quoted config diff and a decoder's document dump removed, cut to a few
// KiB. What is left is Talos' message shape: what failed and where.
func (s *Scrubber) Scrub(text string) string {
	if i := strings.Index(text, immediateDiff); i >= 0 {
		// both sides of the diff hold values, the running config's too,
		// which no scrubber built from the new config knows
		text = text[:i] + " (Talos' diff not shown: it holds both configs' values; devata plan shows a redacted one)"
	}
	if i := strings.Index(text, unknownKeys); i >= 0 {
		text = text[:i] + DecodeError(errors.New(text[i:]))
	}
	text = s.r.Replace(text)
	text, _ = credentials(text)
	if len(text) > maxScrubbed {
		text = strings.ToValidUTF8(text[:maxScrubbed], "") + "… (cut short)"
	}
	return text
}
