package bootstrap

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
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

// RedactConfig returns a machine config with every secret value replaced by
// Redacted, and a hash of each secret by field path, so that secret drift can be
// reported as "changed" without showing either value. Documents are re-encoded
// in the same order.
func RedactConfig(data []byte) ([]byte, map[string][32]byte, error) {
	cfg, err := configloader.NewFromBytes(data)
	if err != nil {
		return nil, nil, fmt.Errorf("load config: %w", err)
	}
	// machinery first: it knows its own types; the walk below catches the rest.
	enc, err := cfg.RedactSecrets(Redacted).EncodeBytes(encoder.WithComments(encoder.CommentsDisabled))
	if err != nil {
		return nil, nil, err
	}
	hashes := map[string][32]byte{}
	// Hash from the original document, so hashes change exactly when secrets do.
	if err := walkDocs(data, func(path string, n *yaml.Node) {
		hashes[path] = sha256.Sum256([]byte(n.Value))
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

func walkDocs(data []byte, fn func(string, *yaml.Node)) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		prefix := docPrefix(&doc, i)
		redactNode(&doc, prefix, false, fn)
	}
}

// docPrefix names a document in hash paths: its kind (and name), else its index.
func docPrefix(doc *yaml.Node, i int) string {
	var kind, name string
	if len(doc.Content) == 1 && doc.Content[0].Kind == yaml.MappingNode {
		m := doc.Content[0].Content
		for j := 0; j+1 < len(m); j += 2 {
			switch m[j].Value {
			case "kind":
				kind = m[j+1].Value
			case "name":
				name = m[j+1].Value
			}
		}
	}
	switch {
	case kind != "" && name != "":
		return kind + "/" + name
	case kind != "":
		return kind
	case i == 0:
		return "v1alpha1"
	}
	return fmt.Sprintf("doc%d", i)
}

// redactNode replaces secret scalars under n with Redacted, calling fn with the
// path and original node of each before it is replaced.
func redactNode(n *yaml.Node, path string, secret bool, fn func(string, *yaml.Node)) {
	switch n.Kind {
	case yaml.DocumentNode:
		for _, c := range n.Content {
			redactNode(c, path, secret, fn)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			redactNode(n.Content[i+1], joinField(path, k), secret || secretKeys[k] || secretParents[k], fn)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			redactNode(c, fmt.Sprintf("%s[%d]", path, i), secret, fn)
		}
	case yaml.ScalarNode:
		if secret && n.Value != "" && n.Tag != "!!bool" && n.Tag != "!!null" {
			fn(path, n)
			n.Value, n.Tag, n.Style = Redacted, "!!str", 0
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
