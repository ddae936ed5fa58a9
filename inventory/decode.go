package inventory

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Pos is a position in the inventory file, 1-based.
type Pos struct {
	Line, Column int
}

// FieldError is one problem with an inventory, located by file, position and field path.
type FieldError struct {
	File  string
	Pos   Pos
	Field string
	Msg   string
}

func (e *FieldError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Pos.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Pos.Line)
		if e.Pos.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Pos.Column)
		}
	}
	if e.Field != "" {
		b.WriteString(": ")
		b.WriteString(e.Field)
	}
	b.WriteString(": ")
	if len(e.Msg) > maxMsg {
		// a message that quotes a huge value (a 50 MiB label) is cut short
		b.WriteString(strings.ToValidUTF8(e.Msg[:maxMsg], ""))
		b.WriteString("… (cut short)")
	} else {
		b.WriteString(e.Msg)
	}
	return b.String()
}

// maxMsg bounds one problem's message.
const maxMsg = 512

// decoder decodes a yaml.Node tree into the inventory types strictly: unknown
// fields, wrong scalar types and duplicate keys are all errors, and every field's
// position is remembered so that validation can point at it later.
type decoder struct {
	file string
	errs []*FieldError
	pos  map[string]Pos
	bad  map[string]bool // paths whose value failed to decode; validation stays quiet on them
	// aliases bounds what YAML aliases expand to (see decode)
	inAlias, aliasNodes, plainNodes int
	aliasRefused                    bool
	// ctx stops the decoding of a very large inventory (looked at every
	// checkEvery nodes); interrupted says it did
	ctx         context.Context
	visited     int
	interrupted bool
}

// checkEvery is how many nodes the decoder visits between looks at its
// context: often enough to stop within milliseconds, rare enough to cost nothing.
const checkEvery = 1024

// An inventory may use aliases, but what they expand to is bounded, as
// yaml.v3 bounds it when it decodes into values ("document contains
// excessive aliasing"): nested aliases can otherwise turn a few kilobytes
// into billions of values.
const (
	aliasAllowance = 10000 // nodes any document may expand through aliases
	aliasRatio     = 10    // and then this many per node written out
)

func newDecoder(file string) *decoder {
	return &decoder{file: file, pos: map[string]Pos{}, bad: map[string]bool{}}
}

func (d *decoder) errorf(n *yaml.Node, path, format string, args ...any) {
	d.errs = append(d.errs, &FieldError{File: d.file, Pos: Pos{n.Line, n.Column}, Field: path, Msg: fmt.Sprintf(format, args...)})
	d.bad[path] = true
}

// decodeDocument decodes data, which must hold exactly one YAML document, into out.
func (d *decoder) decodeDocument(data []byte, out *Inventory) {
	var root yaml.Node
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			d.errs = append(d.errs, &FieldError{File: d.file, Msg: "the file is empty: start from examples/homelab/inventory.yaml"})
			return
		}
		d.errs = append(d.errs, yamlSyntaxError(d.file, err))
		return
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		d.errs = append(d.errs, &FieldError{File: d.file, Pos: Pos{extra.Line, extra.Column}, Msg: "a second YAML document: an inventory file holds exactly one; remove the '---' and what follows"})
	}
	d.decode(&root, reflect.ValueOf(out).Elem(), "")
}

// yamlSyntaxError turns yaml.v3's "yaml: line N: msg" into a positioned error.
func yamlSyntaxError(file string, err error) *FieldError {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	var line int
	if n, _ := fmt.Sscanf(msg, "line %d:", &line); n == 1 {
		msg = strings.TrimSpace(msg[strings.Index(msg, ":")+1:])
	}
	return &FieldError{File: file, Pos: Pos{Line: line}, Msg: "invalid YAML: " + msg}
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if !d.visit(n, v, path) {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		d.decodeStruct(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n, path, "expected a list, got %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, item := range n.Content {
			d.decode(item, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		d.decodeMap(n, v, path)
	default:
		d.decodeScalar(n, v, path)
	}
}

// visit does what every node needs before its value is decoded: it stops
// an interrupted decode, follows documents and aliases (refusing excessive
// aliasing), counts the node and records its position. It is false when
// nothing is left to decode into v (an explicit null leaves the zero
// value, which defaulting may fill).
func (d *decoder) visit(n *yaml.Node, v reflect.Value, path string) bool {
	if d.interrupted {
		return false
	}
	if d.visited++; d.visited%checkEvery == 0 && d.ctx != nil && d.ctx.Err() != nil {
		d.interrupted = true
		return false
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) > 0 {
			d.decode(n.Content[0], v, path)
		}
		return false
	case yaml.AliasNode:
		if d.aliasRefused {
			return false
		}
		if d.aliasNodes > aliasAllowance+aliasRatio*d.plainNodes {
			d.aliasRefused = true
			d.errorf(n, path, "excessive aliasing: the YAML aliases expand to more than %d values; write the values out, or nest fewer aliases", d.aliasNodes)
			return false
		}
		d.inAlias++
		d.decode(n.Alias, v, path)
		d.inAlias--
		return false
	}
	if d.inAlias > 0 {
		d.aliasNodes++
	} else {
		d.plainNodes++
	}
	if path != "" {
		d.pos[path] = Pos{n.Line, n.Column}
	}
	return n.Kind != yaml.ScalarNode || n.Tag != "!!null"
}

// decodeScalar decodes a string, an integer or a boolean, each only from
// a scalar of that YAML type.
func (d *decoder) decodeScalar(n *yaml.Node, v reflect.Value, path string) {
	switch v.Kind() {
	case reflect.String:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			hint := ""
			if n.Kind == yaml.ScalarNode {
				hint = fmt.Sprintf(" (quote it: \"%s\")", n.Value)
			}
			d.errorf(n, path, "expected a string, got %s%s", describe(n), hint)
			return
		}
		v.SetString(n.Value)
	case reflect.Int:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!int" {
			d.errorf(n, path, "expected an integer, got %s", describe(n))
			return
		}
		i, err := strconv.ParseInt(n.Value, 0, 64)
		if err != nil || i < -1<<31 || i > 1<<31-1 {
			d.errorf(n, path, "integer %s out of range", n.Value)
			return
		}
		v.SetInt(i)
	case reflect.Bool:
		if n.Kind != yaml.ScalarNode || n.Tag != "!!bool" {
			d.errorf(n, path, "expected true or false, got %s", describe(n))
			return
		}
		var b bool
		if err := n.Decode(&b); err != nil {
			d.errorf(n, path, "expected true or false, got %q", n.Value)
			return
		}
		v.SetBool(b)
	default:
		panic(fmt.Sprintf("inventory: no decoder for %s", v.Type()))
	}
}

func (d *decoder) decodeStruct(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	fields := yamlFields(v.Type())
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "expected a field name, got %s", describe(k))
			continue
		}
		fpath := joinPath(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, fpath, "duplicate key (first set at line %d): keep one", first.Line)
			continue
		}
		seen[k.Value] = k
		idx, ok := fields[k.Value]
		if !ok {
			d.errorf(k, fpath, "unknown field%s", suggest(k.Value, fields))
			continue
		}
		d.decode(val, v.Field(idx), fpath)
		d.pos[fpath] = Pos{k.Line, k.Column}
	}
}

func (d *decoder) decodeMap(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.errorf(n, path, "expected a mapping, got %s", describe(n))
		return
	}
	m := reflect.MakeMapWithSize(v.Type(), len(n.Content)/2)
	seen := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			d.errorf(k, path, "expected a key, got %s", describe(k))
			continue
		}
		kpath := fmt.Sprintf("%s[%q]", path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.errorf(k, kpath, "duplicate key (first set at line %d): keep one", first.Line)
			continue
		}
		seen[k.Value] = k
		elem := reflect.New(v.Type().Elem()).Elem()
		d.decode(val, elem, kpath)
		m.SetMapIndex(reflect.ValueOf(k.Value), elem)
	}
	v.Set(m)
}

// yamlFields maps yaml field names of t to field indexes.
func yamlFields(t reflect.Type) map[string]int {
	out := map[string]int{}
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out[name] = i
	}
	return out
}

func joinPath(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		case "!!null":
			return "null"
		}
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "unexpected YAML"
}

// suggest names the closest known field, so a typo says what was meant.
func suggest(name string, fields map[string]int) string {
	var names []string
	for f := range fields {
		names = append(names, f)
	}
	sort.Strings(names)
	if best := Nearest(name, names); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return fmt.Sprintf("; known fields: %s", strings.Join(names, ", "))
}

// Nearest is the candidate closest to name, case aside, when it is at most
// two edits away (the first such in candidates' order on a tie), else "":
// what "did you mean" offers, for inventory fields as for the machine and
// check names given on a command line.
func Nearest(name string, candidates []string) string {
	best, bestDist := "", 3
	for _, c := range candidates {
		if dist := levenshtein(strings.ToLower(name), strings.ToLower(c)); dist < bestDist {
			best, bestDist = c, dist
		}
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}
