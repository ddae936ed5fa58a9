package drift_test

import (
	"encoding/xml"
	"errors"
	"slices"
	"strings"
	"testing"

	"devata.dev/devata/drift"
)

func TestJUnitParses(t *testing.T) {
	r := fixtureReport(false)
	r.Add(drift.Drifted("label \x1b[31m\x00 differs", "a", "b").Of("cp-1", "kubelet", drift.RungResources).
		WithDiff("-a ]]> b\n+\x00c\xff\n").WithChanges("labels.a: \"]]>\" → \"\x00\xff\""))
	r.AddError(errors.New("kubernetes: list nodes: forbidden"))
	out := render(t, drift.WriteJUnit, r)
	var doc junit
	if err := xml.Unmarshal(out, &doc); err != nil {
		t.Fatalf("junit does not parse: %v\n%s", err, out)
	}
	// 15 results, one for the machine without results, one for the error.
	if doc.Tests != 17 || doc.Failures != 3 || doc.Errors != 4 {
		t.Errorf("testsuites tests=%d failures=%d errors=%d, want 17, 3, 4", doc.Tests, doc.Failures, doc.Errors)
	}
	type counts struct{ tests, failures, errors int }
	want := map[string]counts{
		"cp-1": {6, 1, 0}, "cp-2": {4, 2, 0}, "worker-1": {2, 0, 2}, "worker-2": {3, 0, 0}, "worker-10": {1, 0, 1}, "devata": {1, 0, 1},
	}
	var names []string
	for _, s := range doc.Suites {
		names = append(names, s.Name)
		var c counts
		for _, tc := range s.Cases {
			c.tests++
			if tc.Failure != nil {
				c.failures++
			}
			if tc.Error != nil {
				c.errors++
			}
			if tc.Time == "" || tc.Name == "" || tc.Classname == "" {
				t.Errorf("%s: testcase lacks name, classname or time: %+v", s.Name, tc)
			}
		}
		if c != (counts{s.Tests, s.Failures, s.Errors}) {
			t.Errorf("suite %s says %d/%d/%d but holds %+v", s.Name, s.Tests, s.Failures, s.Errors, c)
		}
		if c != want[s.Name] {
			t.Errorf("suite %s holds %+v, want %+v", s.Name, c, want[s.Name])
		}
		if s.Time == "" {
			t.Errorf("suite %s has no time", s.Name)
		}
	}
	if wantNames := []string{"cp-1", "cp-2", "worker-1", "worker-2", "worker-10", "devata"}; !slices.Equal(names, wantNames) {
		t.Errorf("suites %v, want %v", names, wantNames)
	}
	if doc.Time == "" {
		t.Errorf("testsuites has no time")
	}
	var texts []string
	for _, s := range doc.Suites {
		for _, tc := range s.Cases {
			if tc.Failure != nil {
				texts = append(texts, tc.Failure.Text)
			}
		}
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{
		"+    hostname: cp-2\n", "-a ]]> b\n+\uFFFDc\uFFFD\n", "reason: label \uFFFD[31m\uFFFD differs",
		"changes:\n  machine.kubelet.image: \"ghcr.io/siderolabs/kubelet:v1.34.0\" → \"ghcr.io/siderolabs/kubelet:v1.34.1\"\n  machine.network.hostname: \"cp-2-old\" → \"cp-2\"\ndiff:\n",
		"changes:\n  labels.a: \"]]>\" → \"\uFFFD\uFFFD\"\ndiff:\n",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("failure texts lack %q:\n%s", want, all)
		}
	}
}
