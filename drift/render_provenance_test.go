package drift_test

import (
	"bytes"
	"encoding/xml"
	"io"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"devata.dev/devata/drift"
	"devata.dev/devata/internal/golden"
	"devata.dev/devata/provenance"
)

// With provenance every format names the inventory's commit, its dirt and
// its sha256; the goldens without it (TestGolden) stay as they were.
func TestGoldenProvenance(t *testing.T) {
	for _, rd := range append(renderers(), renderer{"yaml", "report.yaml", drift.WriteYAML}) {
		if rd.name == "table-color" {
			continue // colour does not touch the provenance line
		}
		t.Run(rd.name, func(t *testing.T) {
			got := render(t, rd.write, provenanceReport(false, fixtureProvenance))
			name := strings.Replace(rd.golden, "report.", "report-provenance.", 1)
			golden.Assert(t, filepath.Join("testdata", name), got)
		})
	}
}

// What each format says, with a commit, clean or dirty, and without Git;
// and nothing of it without provenance.
func TestProvenanceInEveryFormat(t *testing.T) {
	sha := fixtureProvenance.InventorySHA256
	commit := fixtureProvenance.Commit
	clean := fixtureProvenance
	clean.Dirty = false
	noGit := provenance.Info{InventorySHA256: sha}
	formats := append(renderers(), renderer{"yaml", "report.yaml", drift.WriteYAML})
	for _, tc := range []struct {
		name string
		pv   provenance.Info
		want map[string][]string // by renderer
		not  map[string][]string
	}{
		{"dirty", fixtureProvenance, map[string][]string{
			"table": {"inventory: examples/homelab/inventory.yaml @ e5c8b180c025 (dirty), sha256:5605c3848805\n\nNAME "},
			"json":  {`"commit": "` + commit + `"`, `"dirty": true`, `"inventorySha256": "` + sha + `"`},
			"yaml":  {"  commit: " + commit + "\n", "  dirty: true\n"},
			"junit": {`<property name="provenance.commit" value="` + commit + `">`, `<property name="provenance.dirty" value="true">`},
			"prom":  {`devata_inventory_info{cluster="devata-test",commit="` + commit + `",dirty="true",sha256="` + sha + `"} 1`},
		}, nil},
		{"clean", clean, map[string][]string{
			"table": {"inventory: examples/homelab/inventory.yaml @ e5c8b180c025, sha256:5605c3848805\n"},
			"junit": {`<property name="provenance.dirty" value="false">`},
			"prom":  {`dirty="false"`},
		}, map[string][]string{"json": {`"dirty"`}, "table": {"(dirty)"}}},
		{"no Git", noGit, map[string][]string{
			"table": {"inventory: examples/homelab/inventory.yaml, sha256:5605c3848805 (no Git commit)\n"},
			"json":  {`"provenance": {` + "\n" + `    "inventorySha256": "` + sha + `"` + "\n  },"},
			"junit": {`<property name="provenance.inventorySha256" value="` + sha + `">`},
			"prom":  {`devata_inventory_info{cluster="devata-test",commit="",dirty="",sha256="` + sha + `"} 1`},
		}, map[string][]string{"json": {`"commit"`, `"dirty"`}, "junit": {"provenance.commit", "provenance.dirty"}}},
		{"none", provenance.Info{}, nil, map[string][]string{
			"table": {"inventory:"}, "json": {"provenance"}, "yaml": {"provenance"}, "junit": {"provenance"}, "prom": {"devata_inventory_info"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, rd := range formats {
				out := string(render(t, rd.write, provenanceReport(false, tc.pv)))
				for _, want := range tc.want[rd.name] {
					if !strings.Contains(out, want) {
						t.Errorf("%s lacks %q:\n%s", rd.name, want, out)
					}
				}
				for _, not := range tc.not[rd.name] {
					if strings.Contains(out, not) {
						t.Errorf("%s has %q:\n%s", rd.name, not, out)
					}
				}
			}
		})
	}
}

// A simulated report still starts with the notice; the provenance line
// follows it.
func TestProvenanceLineAfterSimulatedNotice(t *testing.T) {
	out := string(render(t, renderers()[0].write, provenanceReport(true, fixtureProvenance)))
	if !strings.HasPrefix(out, "SIMULATED: ") || !strings.Contains(out, "machines.\n\ninventory: examples/homelab/inventory.yaml @ ") {
		t.Errorf("the table does not open with the notice and then the inventory:\n%s", out)
	}
}

// The provenance survives JSON, and a stream writes it as WriteJSON does.
func TestProvenanceJSON(t *testing.T) {
	want := provenanceReport(true, fixtureProvenance)
	out := render(t, drift.WriteJSON, want)
	got := decodeReport(t, out)
	got.Finish()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded provenance %+v, want %+v", got.Provenance, want.Provenance)
	}

	h := fixtureHeader(true)
	h.Provenance = fixtureProvenance
	var buf bytes.Buffer
	s := drift.NewJSONStream(&buf)
	if err := s.Begin(h); err != nil {
		t.Fatal(err)
	}
	s.Add(want.Results...)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), out) {
		t.Errorf("the stream's document differs from WriteJSON's:\n%s\nwant\n%s", buf.Bytes(), out)
	}
}

// The JUnit properties parse, on every suite.
func TestProvenanceJUnitProperties(t *testing.T) {
	var doc struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Props []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:"value,attr"`
			} `xml:"properties>property"`
		} `xml:"testsuite"`
	}
	out := render(t, drift.WriteJUnit, provenanceReport(false, fixtureProvenance))
	if err := xml.NewDecoder(bytes.NewReader(out)).Decode(&doc); err != nil && err != io.EOF {
		t.Fatal(err)
	}
	want := map[string]string{
		"provenance.commit": fixtureProvenance.Commit, "provenance.dirty": "true",
		"provenance.repoPath": fixtureProvenance.RepoPath, "provenance.inventorySha256": fixtureProvenance.InventorySHA256,
	}
	for _, s := range doc.Suites {
		got := map[string]string{}
		for _, p := range s.Props {
			if strings.HasPrefix(p.Name, "provenance.") {
				got[p.Name] = p.Value
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("suite %s: provenance properties %v, want %v", s.Name, got, want)
		}
	}
}

// The info series parses with Prometheus' own parser.
func TestProvenancePrometheus(t *testing.T) {
	series := promSeries(t, render(t, drift.WritePrometheus, provenanceReport(false, fixtureProvenance)))
	key := "devata_inventory_info{cluster=devata-test,commit=" + fixtureProvenance.Commit + ",dirty=true,sha256=" + fixtureProvenance.InventorySHA256 + "}"
	if v, ok := series[key]; !ok || v != 1 {
		t.Errorf("%s = %v (present %t), want 1", key, v, ok)
	}
}
