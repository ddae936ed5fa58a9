package bootstrap

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/inventory"
)

// Redacted replaces every secret value in configs, logs, diffs and reports.
const Redacted = "******"

// secretKeys are field names whose values are secret wherever they appear in a
// Talos config document. machinery's RedactSecrets covers the CA keys, tokens,
// encryption secrets and the service-account key; this list also covers what it
// misses: registry credentials (the whole auth block), client TLS keys, WireGuard
// keys, disk-encryption passphrases and static keys, inline manifests and files.
// redactNode adds env values and URL credentials, which have no field of their own.
var secretKeys = map[string]bool{
	"key": true, "token": true, "secret": true, "password": true, "auth": true,
	"identityToken": true, "privateKey": true, "presharedKey": true, "passphrase": true,
	"keyData": true, "aescbcEncryptionSecret": true, "secretboxEncryptionSecret": true,
	"bootstrapToken": true, "contents": true, "content": true,
}

// secretParents are fields whose whole content is secret: manifest headers
// carry bearer tokens. (Inline manifests and machine files are covered by
// "contents" and "content" above: they routinely carry Kubernetes Secrets.)
var secretParents = map[string]bool{"extraManifestHeaders": true}

// userinfo matches the credentials of a URL anywhere in a value
// ("http://admin:s3cret@proxy:3128", also inside "--flag=…" or a list):
// scheme and host stay, so a diff still says which proxy or mirror changed.
// Greedy up to the last "@" before the path: an unescaped "@" in a password
// must not leave its tail showing.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#\s]+@`)

// urlQuery matches a URL up to the end of its query, anywhere in a value
// ("--config=https://cfg.lan/c?token=…", a list of URLs): the query runs
// from the first "?" to a fragment, whitespace or a character no URL holds
// unescaped (quotes, angle brackets), so a URL quoted inside a value ends
// where the quote does.
var urlQuery = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^?#\s"'<>]*\?[^#\s"'<>]*`)

// credentialParams are query parameter names (lower case, without "-", "_"
// and ".") that carry credentials: API keys and tokens passed in a URL,
// basic-auth stand-ins, pre-signed S3 and GCS URLs (X-Amz-Signature,
// X-Amz-Credential, X-Goog-Signature), Azure SAS (sig) and SideroLink's
// jointoken. credentialSuffixes catch the many spellings of the same
// (access_token, client_secret, X-Amz-Security-Token).
var (
	credentialParams = map[string]bool{
		"key": true, "apikey": true, "accesskey": true, "secretkey": true, "privatekey": true,
		"auth": true, "authorization": true, "pass": true, "passwd": true, "pwd": true, "sig": true,
	}
	credentialSuffixes = []string{"token", "secret", "password", "signature", "credential", "credentials"}
)

// credentialParam reports whether a query parameter's name says its value
// is a credential.
func credentialParam(name string) bool {
	if n, err := url.QueryUnescape(name); err == nil {
		name = n
	}
	name = strings.NewReplacer("-", "", "_", "", ".", "").Replace(strings.ToLower(name))
	if credentialParams[name] {
		return true
	}
	for _, suffix := range credentialSuffixes {
		if strings.HasSuffix(name, suffix) {
			return true
		}
	}
	return false
}

// redactQuery replaces the value of every credential parameter in the
// query of u (a urlQuery match), keeping the parameter names, so that a
// diff still says which URL and which parameter changed. Both "&" and ";"
// separate parameters: some servers take either, and a credential after a
// ";" must not show.
func redactQuery(u string) string {
	q := strings.IndexByte(u, '?')
	var b strings.Builder
	b.WriteString(u[:q+1])
	rest := u[q+1:]
	for rest != "" {
		i := strings.IndexAny(rest, "&;")
		part, sep := rest, ""
		if i >= 0 {
			part, sep, rest = rest[:i], rest[i:i+1], rest[i+1:]
		} else {
			rest = ""
		}
		if name, value, ok := strings.Cut(part, "="); ok && value != "" && credentialParam(name) {
			part = name + "=" + Redacted
		}
		b.WriteString(part)
		b.WriteString(sep)
	}
	return b.String()
}

// redactValue returns s with what is secret inside an otherwise public value
// replaced: URL credentials, in the userinfo or in the query. It reports
// whether anything was replaced.
func redactValue(s string) (string, bool) {
	r := userinfo.ReplaceAllString(s, "${1}"+Redacted+"@")
	if strings.Contains(r, "?") {
		r = urlQuery.ReplaceAllStringFunc(r, redactQuery)
	}
	return r, r != s
}

// machineryRedacted reports whether machinery put its marker in a value: a
// whole field, or a part of one (SideroLink's jointoken, query-escaped).
func machineryRedacted(s string) bool {
	return strings.Contains(s, Redacted) || strings.Contains(s, url.QueryEscape(Redacted))
}

// RedactConfig returns a machine config with every secret value replaced by
// Redacted, and a hash of each secret by field path, so that secret drift can be
// reported as "changed" without showing either value. Documents are re-encoded
// in the same order.
func RedactConfig(data []byte) ([]byte, map[string][32]byte, error) {
	// machinery first: it knows its own types; the walk below catches the rest.
	enc, err := machineryRedact(data)
	if err != nil {
		// the decoder's "unknown keys" error dumps the document (a running
		// config from a newer Talos holds fields this machinery lacks)
		return nil, nil, errors.New(NewScrubber(data).Scrub(err.Error()))
	}
	hashes := map[string][32]byte{}
	// Hash from the original document, so hashes change exactly when secrets do.
	if err := walkDocs(data, func(path string, n *yaml.Node) {
		hashes[path] = sha256.Sum256([]byte(n.Value))
	}); err != nil {
		return nil, nil, err
	}
	// Whatever machinery redacted and the walk does not know (a field added in
	// a later machinery, SideroLink's jointoken) is hashed too, so that its
	// change is reported rather than hidden behind an equal marker.
	marked := map[string]bool{}
	if err := scalars(enc, func(path, v string) {
		if machineryRedacted(v) {
			marked[path] = true
		}
	}); err != nil {
		return nil, nil, err
	}
	if err := scalars(data, func(path, v string) {
		if _, ok := hashes[path]; !ok && marked[path] && !machineryRedacted(v) {
			hashes[path] = sha256.Sum256([]byte(v))
		}
	}); err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	dec := yaml.NewDecoder(bytes.NewReader(enc))
	first := true
	for {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, err
		}
		redactNode(&doc, "", false, func(string, *yaml.Node) {})
		if !first {
			out.WriteString("---\n")
		}
		first = false
		e := yaml.NewEncoder(&out)
		e.SetIndent(4)
		if err := e.Encode(&doc); err != nil {
			return nil, nil, err
		}
		e.Close()
	}
	return out.Bytes(), hashes, nil
}

// machineryRedact is data as machinery's RedactSecrets leaves it, re-encoded.
func machineryRedact(data []byte) ([]byte, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	return cfg.RedactSecrets(Redacted).EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
}

// scalars calls fn with the path and value of every scalar in data's documents.
func scalars(data []byte, fn func(path, v string)) error {
	return eachDoc(data, func(doc *yaml.Node, prefix string) {
		var walk func(n *yaml.Node, path string)
		walk = func(n *yaml.Node, path string) {
			switch n.Kind {
			case yaml.DocumentNode:
				for _, c := range n.Content {
					walk(c, path)
				}
			case yaml.MappingNode:
				for i := 0; i+1 < len(n.Content); i += 2 {
					k, _ := redactValue(n.Content[i].Value)
					walk(n.Content[i+1], joinField(path, k))
				}
			case yaml.SequenceNode:
				for i, c := range n.Content {
					walk(c, fmt.Sprintf("%s[%d]", path, i))
				}
			case yaml.ScalarNode:
				fn(path, n.Value)
			}
		}
		walk(doc, prefix)
	})
}

func walkDocs(data []byte, fn func(string, *yaml.Node)) error {
	return eachDoc(data, func(doc *yaml.Node, prefix string) { redactNode(doc, prefix, false, fn) })
}

func eachDoc(data []byte, fn func(doc *yaml.Node, prefix string)) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		fn(&doc, docPrefix(&doc, i))
	}
}

// docPrefix names a document in hash paths: its kind (and name), else its index.
func docPrefix(doc *yaml.Node, i int) string {
	var kind, name, version string
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0].Content
		for j := 0; j+1 < len(m); j += 2 {
			switch m[j].Value {
			case "kind":
				kind = m[j+1].Value
			case "name":
				name = m[j+1].Value
			case "version":
				version = m[j+1].Value
			}
		}
	}
	// machinery encodes the v1alpha1 document first, wherever the input had it.
	switch {
	case kind == "" && version == "v1alpha1":
		return "v1alpha1"
	case kind != "" && name != "":
		return kind + "/" + name
	case kind != "":
		return kind
	case i == 0:
		return "v1alpha1"
	}
	return fmt.Sprintf("doc%d", i)
}

// redactNode replaces secret scalars under n with Redacted (and URL
// credentials in any scalar), calling fn with the path and original node of
// each before it is replaced.
func redactNode(n *yaml.Node, path string, secret bool, fn func(string, *yaml.Node)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			redactNode(c, path, secret, fn)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			kn := n.Content[i]
			k, changed := redactValue(kn.Value)
			if changed {
				// a key is part of every path below it: never print it whole
				fn(joinField(path, k)+"(key)", kn)
				kn.Value = k
			}
			v, p := n.Content[i+1], joinField(path, k)
			switch {
			case k == "env" && v.Kind == yaml.SequenceNode:
				redactEnvList(v, p, fn)
			case k == "environment" && v.Kind == yaml.SequenceNode:
				redactEnvironment(v, p, fn)
			default:
				// machine.env is where proxies with credentials live: every
				// value is secret, its keys are not (secretParents would not
				// keep keys of a Kubernetes-style list, handled above).
				redactNode(v, p, secret || secretKeys[k] || secretParents[k] || k == "env", fn)
			}
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			redactNode(c, fmt.Sprintf("%s[%d]", path, i), secret, fn)
		}
	case yaml.ScalarNode:
		switch {
		case secret && n.Value != "" && n.Tag != "!!bool" && n.Tag != "!!null":
			fn(path, n)
			n.Value, n.Tag, n.Style = Redacted, "!!str", 0
		case !secret:
			if v, changed := redactValue(n.Value); changed {
				fn(path, n)
				n.Value = v
			}
		}
	}
}

// redactEnvList handles a Kubernetes-style env list (static pods in
// machine.pods): each entry's value is secret, its name is not.
func redactEnvList(seq *yaml.Node, path string, fn func(string, *yaml.Node)) {
	for i, c := range seq.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		if c.Kind != yaml.MappingNode {
			redactNode(c, p, true, fn)
			continue
		}
		for j := 0; j+1 < len(c.Content); j += 2 {
			k := c.Content[j].Value
			redactNode(c.Content[j+1], joinField(p, k), k == "value", fn)
		}
	}
}

// redactEnvironment handles a list of KEY=VALUE strings (an
// ExtensionServiceConfig's environment): VALUE is secret, KEY is not.
func redactEnvironment(seq *yaml.Node, path string, fn func(string, *yaml.Node)) {
	for i, c := range seq.Content {
		p := fmt.Sprintf("%s[%d]", path, i)
		key, _, ok := strings.Cut(c.Value, "=")
		if c.Kind != yaml.ScalarNode || !ok {
			redactNode(c, p, true, fn)
			continue
		}
		if c.Value != key+"="+Redacted {
			fn(joinField(p, key), c)
			c.Value, c.Tag, c.Style = key+"="+Redacted, "!!str", 0
		}
	}
}

func joinField(path, k string) string {
	if path == "" {
		return k
	}
	if strings.ContainsAny(k, ".[]") {
		return fmt.Sprintf("%s[%q]", path, k)
	}
	return path + "." + k
}

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
// URL credentials are scrubbed whatever their length (redactValue).
const (
	minSecret     = 4
	minSecretLine = 12 // a line of a multi-line secret (a manifest, a PEM key)
)

// NewScrubber collects the secret values of configs: whatever RedactConfig
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
		text = text[:i] + inventory.PatchError(errors.New(text[i:]))
	}
	text = s.r.Replace(text)
	text, _ = redactValue(text)
	if len(text) > maxScrubbed {
		text = strings.ToValidUTF8(text[:maxScrubbed], "") + "… (cut short)"
	}
	return text
}
