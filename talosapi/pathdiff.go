package talosapi

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// maxChanges is how many changed paths a ConfigDiff lists before it counts
// the rest: a config rewritten wholesale reads as a count, not a page.
const maxChanges = 50

// maxValue is how many characters of a value a change line shows.
const maxValue = 80

// pathChanges lists the differences between two config documents by YAML
// path, one line each ("machine.network.hostname: "a" → "b""), at most
// limit of them and then "… and N more". It must be given the redacted
// documents (what the unified diff is made of): it shows values as they
// are, so a secret shows as redact.Redacted. Documents are matched by kind
// and name (the v1alpha1 document has neither and its paths no prefix);
// lists by a "name" key when every element has a unique one, else by index.
func pathChanges(old, new []byte, limit int) ([]string, error) {
	oldDocs, oldOrder, err := documents(old)
	if err != nil {
		return nil, fmt.Errorf("applied config: %w", err)
	}
	newDocs, newOrder, err := documents(new)
	if err != nil {
		return nil, fmt.Errorf("desired config: %w", err)
	}
	var c changes
	for _, key := range oldOrder {
		if _, ok := newDocs[key]; !ok {
			c.add(key, "removed document")
		}
	}
	for _, key := range newOrder {
		n := newDocs[key]
		o, ok := oldDocs[key]
		if !ok {
			c.add(key, "added document")
			continue
		}
		prefix := key
		if key == "v1alpha1" {
			prefix = ""
		}
		c.compare(prefix, o, n)
	}
	return c.bounded(limit), nil
}

// documents decodes every YAML document of data, keyed as redact names
// them in secret paths: kind/name, kind, v1alpha1 or docN.
func documents(data []byte) (map[string]*yaml.Node, []string, error) {
	docs := map[string]*yaml.Node{}
	var order []string
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return docs, order, nil
			}
			return nil, nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		var root *yaml.Node
		if len(doc.Content) == 1 {
			root = doc.Content[0]
		}
		key := docKey(root, i)
		// two documents of the same kind and name: Talos refuses such a
		// config, but the diff must still not fold them into one
		for n := 2; docs[key] != nil; n++ {
			key = fmt.Sprintf("%s#%d", docKey(root, i), n)
		}
		docs[key] = root
		order = append(order, key)
	}
}

// docKey names a document: its kind (and name), v1alpha1 for the document
// that has a version and no kind (or the first, if it has neither), else
// its position.
func docKey(root *yaml.Node, i int) string {
	var kind, name, version string
	if root != nil && root.Kind == yaml.MappingNode {
		for j := 0; j+1 < len(root.Content); j += 2 {
			switch root.Content[j].Value {
			case "kind":
				kind = root.Content[j+1].Value
			case "name":
				name = root.Content[j+1].Value
			case "version":
				version = root.Content[j+1].Value
			}
		}
	}
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

type changes struct{ lines []string }

func (c *changes) add(path, what string) {
	if path == "" {
		path = "(document)"
	}
	c.lines = append(c.lines, path+": "+what)
}

func (c *changes) bounded(limit int) []string {
	if len(c.lines) <= limit {
		return c.lines
	}
	return append(c.lines[:limit:limit], fmt.Sprintf("… and %d more", len(c.lines)-limit))
}

// compare adds the differences between o and n, found at path.
func (c *changes) compare(path string, o, n *yaml.Node) {
	o, n = deref(o), deref(n)
	switch {
	case o == nil && n == nil:
		return
	case o == nil:
		c.add(path, "added "+show(n))
		return
	case n == nil:
		c.add(path, "removed")
		return
	case o.Kind != n.Kind:
		c.add(path, show(o)+" → "+show(n))
		return
	}
	switch o.Kind {
	case yaml.MappingNode:
		c.compareMaps(path, o, n)
	case yaml.SequenceNode:
		c.compareLists(path, o, n)
	default:
		if scalarText(o) != scalarText(n) {
			c.add(path, show(o)+" → "+show(n))
		}
	}
}

func (c *changes) compareMaps(path string, o, n *yaml.Node) {
	ok, okeys := fields(o)
	nk, nkeys := fields(n)
	for _, k := range okeys {
		if _, there := nk[k]; !there {
			c.add(field(path, k), "removed")
		}
	}
	for _, k := range nkeys {
		c.compare(field(path, k), ok[k], nk[k])
	}
}

func (c *changes) compareLists(path string, o, n *yaml.Node) {
	oNames, oOK := names(o)
	nNames, nOK := names(n)
	if oOK && nOK {
		nByName := map[string]*yaml.Node{}
		for i, name := range nNames {
			nByName[name] = n.Content[i]
		}
		oByName := map[string]*yaml.Node{}
		var kept []string
		for i, name := range oNames {
			oByName[name] = o.Content[i]
			if _, there := nByName[name]; !there {
				c.add(byName(path, name), "removed")
			} else {
				kept = append(kept, name)
			}
		}
		j := 0
		reordered := false
		for _, name := range nNames {
			if _, there := oByName[name]; !there {
				c.add(byName(path, name), "added "+show(nByName[name]))
				continue
			}
			if kept[j] != name {
				reordered = true
			}
			j++
			c.compare(byName(path, name), oByName[name], nByName[name])
		}
		if reordered {
			c.add(path, "reordered")
		}
		return
	}
	for i := 0; i < max(len(o.Content), len(n.Content)); i++ {
		p := fmt.Sprintf("%s[%d]", path, i)
		switch {
		case i >= len(n.Content):
			c.add(p, "removed")
		case i >= len(o.Content):
			c.add(p, "added "+show(n.Content[i]))
		default:
			c.compare(p, o.Content[i], n.Content[i])
		}
	}
}

// deref follows an alias to what it names.
func deref(n *yaml.Node) *yaml.Node {
	for depth := 0; n != nil && n.Kind == yaml.AliasNode && depth < 16; depth++ {
		n = n.Alias
	}
	return n
}

// fields are a mapping's values by key, and its keys in order; a key
// given twice counts once, with its last value (as a decoder reads it).
func fields(m *yaml.Node) (map[string]*yaml.Node, []string) {
	byKey := map[string]*yaml.Node{}
	var keys []string
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := m.Content[i].Value
		if _, dup := byKey[k]; !dup {
			keys = append(keys, k)
		}
		byKey[k] = m.Content[i+1]
	}
	return byKey, keys
}

// names returns the "name" of every element of a list, and whether each
// element is a mapping with a scalar name, none repeated. An empty list
// has no names: it is compared by index, which says the same.
func names(seq *yaml.Node) ([]string, bool) {
	if len(seq.Content) == 0 {
		return nil, false
	}
	seen := map[string]bool{}
	out := make([]string, 0, len(seq.Content))
	for _, el := range seq.Content {
		el = deref(el)
		if el == nil || el.Kind != yaml.MappingNode {
			return nil, false
		}
		f, _ := fields(el)
		v := deref(f["name"])
		if v == nil || v.Kind != yaml.ScalarNode || seen[v.Value] {
			return nil, false
		}
		seen[v.Value] = true
		out = append(out, v.Value)
	}
	return out, true
}

// field is path.k, or path["k"] for a key that is not a plain word (a
// sysctl, a label, anything a terminal would not print as it is).
func field(path, k string) string {
	plain := k != ""
	for _, r := range k {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '/') {
			plain = false
			break
		}
	}
	switch {
	case !plain:
		return path + "[" + strconv.Quote(k) + "]"
	case path == "":
		return k
	}
	return path + "." + k
}

func byName(path, name string) string {
	return path + "[name=" + strconv.Quote(name) + "]"
}

// scalarText is what a scalar says: its tag and value, so that "1" and 1
// differ as YAML sees them.
func scalarText(n *yaml.Node) string { return n.ShortTag() + " " + n.Value }

// show prints a value on one line: a string quoted, another scalar as it
// is, a mapping or list in flow style; cut to maxValue characters.
func show(n *yaml.Node) string {
	n = deref(n)
	var s string
	switch {
	case n == nil:
		return "null"
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		s = strconv.Quote(n.Value)
	case n.Kind == yaml.ScalarNode:
		s = strconv.QuoteToGraphic(n.Value)
		s = s[1 : len(s)-1]
	default:
		s = flow(n)
	}
	if r := []rune(s); len(r) > maxValue {
		s = string(r[:maxValue-1]) + "…"
	}
	return s
}

// flow encodes a mapping or list in YAML's flow style, on one line, with
// its strings quoted as Go quotes them (no control characters, no
// bidirectional overrides reach a terminal).
func flow(n *yaml.Node) string {
	var b strings.Builder
	var walk func(n *yaml.Node, depth int)
	walk = func(n *yaml.Node, depth int) {
		n = deref(n)
		switch {
		case n == nil:
			b.WriteString("null")
		case depth > 8 || b.Len() > maxValue:
			b.WriteString("…")
		case n.Kind == yaml.MappingNode:
			b.WriteString("{")
			for i := 0; i+1 < len(n.Content); i += 2 {
				if i > 0 {
					b.WriteString(", ")
				}
				b.WriteString(strings.TrimPrefix(field("", n.Content[i].Value), "."))
				b.WriteString(": ")
				walk(n.Content[i+1], depth+1)
			}
			b.WriteString("}")
		case n.Kind == yaml.SequenceNode:
			b.WriteString("[")
			for i, c := range n.Content {
				if i > 0 {
					b.WriteString(", ")
				}
				walk(c, depth+1)
			}
			b.WriteString("]")
		default:
			b.WriteString(show(n))
		}
	}
	walk(n, 0)
	return b.String()
}
