// Package redact removes secret values from everything devata prints: configs
// and their diffs, Talos' error text about a config, and decoder errors about
// a patch. It is a leaf: every package that prints may use it, it uses none of
// devata's.
package redact

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"strings"

	"github.com/siderolabs/talos/pkg/machinery/config/configloader"
	"github.com/siderolabs/talos/pkg/machinery/config/encoder"
	"gopkg.in/yaml.v3"
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

// secretShapes are what a field or flag name holds, any case and any
// separator, when its value is a credential: extraArgs such as
// basic-auth-password, oidc-client-secret, client_secret, api-token or
// x-api-key have no field of their own, so their names are all there is
// (as for URL query parameters: credentialParam).
var secretShapes = []string{"password", "passwd", "passphrase", "secret", "token", "credential", "apikey", "privatekey", "accesskey"}

// secretName says whether a field or flag name is a secret's: one of
// secretKeys, or of a secret's shape.
func secretName(k string) bool {
	if secretKeys[k] {
		return true
	}
	n := strings.NewReplacer("-", "", "_", "", ".", "").Replace(strings.ToLower(strings.TrimLeft(k, "-")))
	for _, shape := range secretShapes {
		if strings.Contains(n, shape) {
			return true
		}
	}
	return false
}

// flagValue matches a command-line flag with its value inside a scalar
// (an args list's "--oidc-client-secret=…"): the value runs to the end of
// the word.
var flagValue = regexp.MustCompile(`(--?[A-Za-z][A-Za-z0-9_.-]*)=([^\s"']+)`)

// flagCredentials replaces the values of flags whose names are a secret's.
func flagCredentials(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	return flagValue.ReplaceAllStringFunc(s, func(m string) string {
		name, _, _ := strings.Cut(m, "=")
		if secretName(name) {
			return name + "=" + Redacted
		}
		return m
	})
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

// credentials returns s with what is secret inside an otherwise public value
// replaced: URL credentials, in the userinfo or in the query. It reports
// whether anything was replaced.
func credentials(s string) (string, bool) {
	r := userinfo.ReplaceAllString(flagCredentials(s), "${1}"+Redacted+"@")
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

// secretHash hashes a secret in one form wherever a config holds it: the
// v1alpha1 document keeps a PEM key or certificate base64-encoded
// (cluster.ca.key), the documents of Talos 1.14 keep it as PEM
// (KubeAPIServerCAConfig issuingCA.key), so a PEM is hashed decoded, with
// its trailing whitespace trimmed; anything else as it stands.
func secretHash(v string) [32]byte {
	pem := strings.TrimSpace(v)
	if b, err := base64.StdEncoding.DecodeString(pem); err == nil && bytes.HasPrefix(bytes.TrimSpace(b), []byte("-----BEGIN ")) {
		pem = string(bytes.TrimSpace(b))
	}
	if strings.HasPrefix(pem, "-----BEGIN ") {
		return sha256.Sum256([]byte(pem))
	}
	return sha256.Sum256([]byte(v))
}

// Config returns a machine config with every secret value replaced by
// Redacted, and a hash of each secret by field path, so that secret drift can be
// reported as "changed" without showing either value. Documents are re-encoded
// in the same order.
func Config(data []byte) ([]byte, map[string][32]byte, error) {
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
		hashes[path] = secretHash(n.Value)
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
			hashes[path] = secretHash(v)
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
					k, _ := credentials(n.Content[i].Value)
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
			k, changed := credentials(kn.Value)
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
			case k == "env" && v.Kind == yaml.MappingNode && !secret:
				redactEnvMap(v, p, fn)
			default:
				redactNode(v, p, secret || secretName(k) || secretParents[k], fn)
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
			if v, changed := credentials(n.Value); changed {
				fn(path, n)
				n.Value = v
			}
		}
	}
}

// redactEnvMap handles machine.env, where proxies with credentials live:
// a value is secret when its variable's name has a credential's shape
// (envSecretName: AWS_SECRET_ACCESS_KEY, GITHUB_TOKEN, DB_PASSWORD, API_KEY),
// and every other value still loses URL credentials (https_proxy's
// userinfo, a token in a query). Names are never secret. Before, every
// value was redacted and a TZ change read "1 secret changed" (issue 33).
func redactEnvMap(m *yaml.Node, path string, fn func(string, *yaml.Node)) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		kn := m.Content[i]
		k, changed := credentials(kn.Value)
		if changed {
			fn(joinField(path, k)+"(key)", kn)
			kn.Value = k
		}
		redactNode(m.Content[i+1], joinField(path, k), envSecretName(k), fn)
	}
}

// envSecretName says whether an environment variable's name is a
// credential's: a secret field's or flag's name (secretName, any case),
// or one ending in KEY, PASS or PWD, or naming AUTH or CRED anywhere
// (PROXY_AUTH, GOOGLE_APPLICATION_CREDENTIALS_JSON, DB_PASS).
func envSecretName(k string) bool {
	if secretName(k) || secretKeys[strings.ToLower(k)] {
		return true
	}
	n := strings.NewReplacer("-", "", "_", "", ".", "").Replace(strings.ToLower(k))
	for _, suffix := range []string{"key", "pass", "pwd"} {
		if strings.HasSuffix(n, suffix) {
			return true
		}
	}
	return strings.Contains(n, "auth") || strings.Contains(n, "cred")
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

// Credentials returns s with URL credentials (userinfo, credential query
// parameters) and --flag=value credentials replaced by Redacted: for text
// that is public but may carry them, such as a kernel command line
// (talos.config= takes a URL).
func Credentials(s string) string {
	r, _ := credentials(s)
	return r
}
