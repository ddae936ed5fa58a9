package drift_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"devata.dev/devata/drift"
)

// -o yaml is the JSON document in YAML (issue 17): the same fields and
// values, diffs as block scalars.
func TestYAMLIsTheJSONDocument(t *testing.T) {
	rep := fixtureReport(false)
	var j, y bytes.Buffer
	if err := drift.Render(&j, drift.FormatJSON, rep, drift.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := drift.Render(&y, drift.FormatYAML, rep, drift.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	var fromJSON, fromYAML any
	if err := json.Unmarshal(j.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil {
		t.Fatalf("-o yaml does not parse: %v\n%s", err, y.String())
	}
	if !reflect.DeepEqual(fromJSON, fromYAML) {
		t.Errorf("-o yaml holds another document than -o json:\n%s", y.String())
	}
	if !strings.Contains(y.String(), "diff: |") {
		t.Errorf("diffs are not block scalars:\n%s", y.String())
	}
}
