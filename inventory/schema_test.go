package inventory_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v5"
	"gopkg.in/yaml.v3"

	"devata.dev/devata/internal/golden"
	"devata.dev/devata/inventory"
)

const schemaFile = "inventory.schema.json"

func TestCommittedSchemaMatchesTypes(t *testing.T) {
	got, err := inventory.JSONSchema()
	if err != nil {
		t.Fatal(err)
	}
	// The committed schema follows the Go types: after changing them, rewrite
	// it with -update and commit it.
	golden.Assert(t, schemaFile, got)
}

func compileSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.Draft = jsonschema.Draft2020
	data, err := os.ReadFile(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource(inventory.SchemaID, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	return c.MustCompile(inventory.SchemaID)
}

func yamlToJSONValue(t *testing.T, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	// Round-trip through JSON so the validator sees plain JSON types.
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSchemaAcceptsValidInventories(t *testing.T) {
	s := compileSchema(t)
	files, _ := filepath.Glob("testdata/valid-*.yaml")
	files = append(files, "../examples/homelab/inventory.yaml")
	for _, f := range files {
		if err := s.Validate(yamlToJSONValue(t, f)); err != nil {
			t.Errorf("%s: schema rejects a valid inventory: %v", f, err)
		}
	}
}

func TestSchemaRejectsStructuralFaults(t *testing.T) {
	s := compileSchema(t)
	for _, name := range []string{"unknown-top-field", "unknown-cluster-field", "wrong-type-port", "version-float", "bad-cni", "labels", "mounts", "raw-disks", "groups", "via-kubernetes"} {
		f := "testdata/invalid-" + name + ".yaml"
		err := s.Validate(yamlToJSONValue(t, f))
		if err == nil {
			t.Errorf("%s: schema accepts it", f)
		} else if !strings.Contains(err.Error(), "jsonschema") {
			t.Errorf("%s: unexpected error %v", f, err)
		}
	}
}
