package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"devata.dev/devata/plan"
)

// docs/report.md documents every field of devata plan's JSON (package
// plan's types, and the envelope plan.Write puts around them), no other.
func TestPlanJSONMatchesItsDocs(t *testing.T) {
	b, err := os.ReadFile("../../docs/report.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The plan of `devata plan` (`-o json`)\n")
	if !ok {
		t.Fatal("docs/report.md has no section on devata plan's JSON")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	table := func(heading string) map[string]bool {
		_, s, ok := strings.Cut(section, "\n"+heading+"\n")
		if !ok {
			t.Fatalf("docs/report.md has no %q in its section on devata plan's JSON", heading)
		}
		s, _, _ = strings.Cut(s, "\n#")
		fields := map[string]bool{}
		for _, m := range regexp.MustCompile("(?m)^\\| `([A-Za-z0-9]+)` \\| ([^|]*)\\|").FindAllStringSubmatch(s, -1) {
			fields[m[1]] = strings.Contains(m[2], "omitempty")
		}
		return fields
	}
	fieldsOf := func(typ reflect.Type) map[string]bool {
		out := map[string]bool{}
		for i := range typ.NumField() {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			out[name] = strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		}
		return out
	}
	// the envelope plan.Write adds around the Plan
	envelope := fieldsOf(reflect.TypeFor[plan.Plan]())
	envelope["apiVersion"], envelope["kind"], envelope["simulated"], envelope["pending"], envelope["blocked"] = false, false, true, false, false
	for heading, code := range map[string]map[string]bool{
		"### `Plan`":           envelope,
		"### `step`":           fieldsOf(reflect.TypeFor[plan.Step]()),
		"### `evidence`":       fieldsOf(reflect.TypeFor[plan.Evidence]()),
		"### `contract`":       fieldsOf(reflect.TypeFor[plan.Contract]()),
		"### Contract machine": fieldsOf(reflect.TypeFor[plan.ContractMachine]()),
		"### `orphan`":         fieldsOf(reflect.TypeFor[plan.Orphan]()),
		"### `kubernetes`":     fieldsOf(reflect.TypeFor[plan.KubernetesChange]()),
		"### Kubernetes step":  fieldsOf(reflect.TypeFor[plan.KubernetesStep]()),
		"### Recover source":   fieldsOf(reflect.TypeFor[plan.RecoverSource]()),
		"### Recover proof":    fieldsOf(reflect.TypeFor[plan.RecoverProof]()),
		"### Patch order":      fieldsOf(reflect.TypeFor[plan.MachinePatches]()),
		"### Node keys":        fieldsOf(reflect.TypeFor[plan.NodeKeys]()),
		"### Node key changes": fieldsOf(reflect.TypeFor[plan.NodeKeyChanges]()),
	} {
		if docs := table(heading); !reflect.DeepEqual(docs, code) {
			t.Errorf("%s: docs %v, code %v (field: omitempty)", heading, docs, code)
		}
	}
}
