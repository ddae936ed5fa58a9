package inventory

import (
	"encoding/json"
	"reflect"
	"strings"
)

// SchemaID is the $id of the inventory's JSON Schema.
const SchemaID = "https://devata.dev/schemas/inventory-v1alpha1.json"

// JSONSchema returns the JSON Schema (draft 2020-12) of the inventory, derived
// from the Go types so the two cannot disagree. Editors use it to complete and
// lint inventories; the committed copy is inventory.schema.json.
func JSONSchema() ([]byte, error) {
	s := schemaFor(reflect.TypeFor[Inventory]())
	s["$schema"] = "https://json-schema.org/draft/2020-12/schema"
	s["$id"] = SchemaID
	s["title"] = "devata inventory (" + APIVersion + ")"
	props := s["properties"].(map[string]any)
	props["apiVersion"].(map[string]any)["const"] = APIVersion
	props["kind"].(map[string]any)["const"] = Kind
	b, err := json.MarshalIndent(s, "", "  ")
	return append(b, '\n'), err
}

func schemaFor(t reflect.Type) map[string]any {
	switch t.Kind() {
	case reflect.Pointer:
		return schemaFor(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Int:
		return map[string]any{"type": "integer"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": schemaFor(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaFor(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var required []string
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "" || name == "-" {
				continue
			}
			p := schemaFor(f.Type)
			if doc := f.Tag.Get("doc"); doc != "" {
				p["description"] = doc
			}
			if enum := f.Tag.Get("enum"); enum != "" {
				p["enum"] = strings.Split(enum, ",")
			}
			if f.Tag.Get("required") == "true" {
				required = append(required, name)
			}
			props[name] = p
		}
		out := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
		if len(required) > 0 {
			out["required"] = required
		}
		return out
	}
	panic("inventory: no schema for " + t.String())
}
