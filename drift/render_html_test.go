package drift_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"

	"devata.dev/devata/drift"
)

// page is a parsed HTML report.
type page struct {
	t    *testing.T
	raw  string
	root *html.Node
}

func parsePage(t *testing.T, r *drift.Report) *page {
	t.Helper()
	var buf bytes.Buffer
	if err := drift.WriteHTML(&buf, r); err != nil {
		t.Fatal(err)
	}
	root, err := html.Parse(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("parse the HTML report: %v", err)
	}
	return &page{t: t, raw: buf.String(), root: root}
}

func attr(n *html.Node, key string) (string, bool) {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val, true
		}
	}
	return "", false
}

func hasClass(n *html.Node, class string) bool {
	v, _ := attr(n, "class")
	return slices.Contains(strings.Fields(v), class)
}

// all returns every element for which match is true, in document order.
func (p *page) all(match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	for n := range p.root.Descendants() {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
	}
	return out
}

func (p *page) byID(id string) *html.Node {
	found := p.all(func(n *html.Node) bool { v, _ := attr(n, "id"); return v == id })
	if len(found) != 1 {
		p.t.Fatalf("%d elements with id %q, want 1", len(found), id)
	}
	return found[0]
}

func text(n *html.Node) string {
	var b strings.Builder
	for d := range n.Descendants() {
		if d.Type == html.TextNode {
			b.WriteString(d.Data)
		}
	}
	return b.String()
}

// The grid has exactly one cell per result, carrying the result's machine,
// check, status and rung, sitting in its machine's row, and opening a
// details section that holds the result's reason, evidence, diff and next step.
func TestHTMLOneCellPerResult(t *testing.T) {
	r := provenanceReport(false, fixtureProvenance)
	p := parsePage(t, r)
	cells := p.all(func(n *html.Node) bool { return n.DataAtom == atom.A && hasClass(n, "cell") })
	if len(cells) != len(r.Results) {
		t.Fatalf("%d cells, want one per result (%d)", len(cells), len(r.Results))
	}
	var got, want []string
	for _, res := range r.Results {
		want = append(want, fmt.Sprintf("%s/%s %s %s", res.Machine, res.Check, res.Status, res.Rung))
	}
	for _, c := range cells {
		m, _ := attr(c, "data-machine")
		ch, _ := attr(c, "data-check")
		s, _ := attr(c, "data-status")
		g, _ := attr(c, "data-rung")
		got = append(got, fmt.Sprintf("%s/%s %s %s", m, ch, s, g))
		if row, _ := attr(c.Parent.Parent, "data-machine"); row != m {
			t.Errorf("cell %s/%s sits in the row of %q", m, ch, row)
		}
		if !hasClass(c, "s-"+s) {
			t.Errorf("cell %s/%s is not coloured as %s", m, ch, s)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("cells:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Every row is a machine, the one nothing was observed of included.
	rows := p.all(func(n *html.Node) bool { _, ok := attr(n, "data-machine"); return n.DataAtom == atom.Tr && ok })
	if len(rows) != len(r.Machines) {
		t.Errorf("%d machine rows, want %d", len(rows), len(r.Machines))
	}
	if !strings.Contains(text(rows[len(rows)-1]), "nothing was observed") {
		t.Errorf("worker-10's row does not say nothing was observed: %q", text(rows[len(rows)-1]))
	}

	for i, c := range cells {
		href, _ := attr(c, "href")
		d := p.byID(strings.TrimPrefix(href, "#"))
		if !hasClass(d, "detail") {
			t.Fatalf("cell %d opens %s, not a details section", i, href)
		}
		m, _ := attr(c, "data-machine")
		ch, _ := attr(c, "data-check")
		res := r.Results[slices.IndexFunc(r.Results, func(x drift.Result) bool { return x.Machine == m && x.Check == ch })]
		body := text(d)
		for _, s := range slices.Concat([]string{res.Reason, res.Desired, res.Actual, res.Next}, res.Evidence) {
			if !strings.Contains(body, s) {
				t.Errorf("details of %s/%s lack %q", m, ch, s)
			}
		}
		for line := range strings.Lines(res.Diff) {
			if !strings.Contains(body, strings.TrimSuffix(line, "\n")) {
				t.Errorf("details of %s/%s lack the diff line %q", m, ch, line)
			}
		}
		// the changes by path: one list item each, in order, before the diff
		var items []string
		for _, ul := range (&page{root: d}).all(func(n *html.Node) bool { return n.DataAtom == atom.Ul && hasClass(n, "changes") }) {
			for li := ul.FirstChild; li != nil; li = li.NextSibling {
				items = append(items, text(li))
			}
		}
		if !slices.Equal(items, res.Changes) {
			t.Errorf("details of %s/%s list the changes %q, want %q", m, ch, items, res.Changes)
		}
		if len(res.Changes) > 0 && strings.Index(body, res.Changes[0]) > strings.Index(body, "--- applied") {
			t.Errorf("details of %s/%s show the changes after the diff", m, ch)
		}
		if res.Blocks() != strings.Contains(body, "fail-closed: blocks a rollout") {
			t.Errorf("details of %s/%s: blocks %v, page says %q", m, ch, res.Blocks(), body)
		}
	}

	// The filters offer the three statuses and the rungs the report has.
	values := func(name string) []string {
		var out []string
		for _, in := range p.all(func(n *html.Node) bool { v, _ := attr(n, "name"); return n.DataAtom == atom.Input && v == name }) {
			v, _ := attr(in, "value")
			out = append(out, v)
		}
		return out
	}
	if got := values("status"); !slices.Equal(got, []string{"InSync", "Drifted", "Unknown"}) {
		t.Errorf("status filters %v", got)
	}
	if got := values("rung"); !slices.Equal(got, []string{"declaration", "reconciliation", "resources", "infrastructure"}) {
		t.Errorf("rung filters %v", got)
	}
}

// The page fetches nothing: no stylesheet link, no script or image source,
// no URL in its style, and a Content-Security-Policy that allows nothing but
// the page's own inline style and script, named by their hashes (which must
// match, or a browser would not run them).
func TestHTMLIsSelfContained(t *testing.T) {
	p := parsePage(t, provenanceReport(true, fixtureProvenance))
	for _, n := range p.all(func(*html.Node) bool { return true }) {
		switch n.DataAtom {
		case atom.Link, atom.Img, atom.Iframe, atom.Object, atom.Embed, atom.Base, atom.Video, atom.Audio, atom.Source:
			t.Errorf("the page has a <%s>", n.Data)
		}
		for _, a := range n.Attr {
			switch a.Key {
			case "src", "srcset", "action", "formaction", "poster", "style":
				t.Errorf("<%s> has %s=%q", n.Data, a.Key, a.Val)
			case "href":
				if !strings.HasPrefix(a.Val, "#") {
					t.Errorf("<%s> links out: href=%q", n.Data, a.Val)
				}
			}
			if strings.HasPrefix(a.Key, "on") {
				t.Errorf("<%s> has an inline handler %s", n.Data, a.Key)
			}
		}
	}
	scripts := p.all(func(n *html.Node) bool { return n.DataAtom == atom.Script })
	styles := p.all(func(n *html.Node) bool { return n.DataAtom == atom.Style })
	if len(scripts) != 1 || len(styles) != 1 {
		t.Fatalf("%d scripts and %d styles, want one of each", len(scripts), len(styles))
	}
	css := text(styles[0])
	for _, bad := range []string{"url(", "@import", "@font-face", "http:", "https:"} {
		if strings.Contains(css, bad) {
			t.Errorf("the style has %q", bad)
		}
	}
	if js := text(scripts[0]); strings.Contains(js, "fetch(") || strings.Contains(js, "XMLHttpRequest") || strings.Contains(js, "http") {
		t.Errorf("the script may reach the network")
	}
	metas := p.all(func(n *html.Node) bool {
		v, _ := attr(n, "http-equiv")
		return n.DataAtom == atom.Meta && v == "Content-Security-Policy"
	})
	if len(metas) != 1 {
		t.Fatalf("%d CSP metas, want 1", len(metas))
	}
	csp, _ := attr(metas[0], "content")
	hash := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	for _, want := range []string{"default-src 'none'", "script-src " + hash(text(scripts[0])), "style-src " + hash(css)} {
		if !strings.Contains(csp, want) {
			t.Errorf("CSP %q lacks %q", csp, want)
		}
	}
	if strings.Contains(csp, "unsafe") {
		t.Errorf("CSP %q allows unsafe sources", csp)
	}
}

// The page names the cluster, the time and the inventory's provenance, and
// says SIMULATED at its top and bottom when the fleet was simulated, only then.
func TestHTMLHeader(t *testing.T) {
	for _, simulated := range []bool{true, false} {
		p := parsePage(t, provenanceReport(simulated, fixtureProvenance))
		if got := text(p.byID("cluster")); got != "devata-test" {
			t.Errorf("cluster %q", got)
		}
		meta := text(p.byID("meta"))
		for _, want := range []string{"2026-12-02T15:00:00Z", "examples/homelab/inventory.yaml", fixtureProvenance.Commit, fixtureProvenance.InventorySHA256, "dirty"} {
			if !strings.Contains(meta, want) {
				t.Errorf("header lacks %q: %q", want, meta)
			}
		}
		marks := p.all(func(n *html.Node) bool { return hasClass(n, "simulated") })
		title := text(p.all(func(n *html.Node) bool { return n.DataAtom == atom.Title })[0])
		if simulated && (len(marks) != 2 || !strings.Contains(text(marks[0]), "SIMULATED") || !strings.HasPrefix(title, "SIMULATED")) {
			t.Errorf("a simulated page must say SIMULATED in its title, top and bottom: %d marks, title %q", len(marks), title)
		}
		if !simulated && (len(marks) != 0 || strings.Contains(p.raw, "SIMULATED")) {
			t.Errorf("a real page says SIMULATED")
		}
	}
	// Without provenance, no commit line.
	p := parsePage(t, fixtureReport(false))
	if strings.Contains(text(p.byID("meta")), "commit") {
		t.Errorf("a report without provenance shows a commit")
	}
}

// Text read from machines is text on the page: markup in a reason, a
// machine name or a diff cannot add elements, script or attributes, and
// control characters are escaped as in the table.
func TestHTMLEscapesHostileText(t *testing.T) {
	hostile := `</script><script>alert(1)</script><img src=x onerror=alert(2)>"'` + "\x1b[31m\u202e"
	r := drift.NewReport(drift.Header{Cluster: hostile, Machines: []drift.Machine{{Name: `cp-1"><b>`, Role: hostile}}})
	r.Add(drift.Drifted(hostile, hostile, hostile).Of(`cp-1"><b>`, hostile, drift.Rung(hostile)).
		WithDiff("--- a\n+++ b\n-"+hostile+"\n+</pre>ok\n").WithChanges(hostile, "</ul></dd><script>alert(3)</script>").WithEvidence(hostile).WithNext(hostile))
	r.AddError(fmt.Errorf("line one\n%s", hostile))
	r.Finish()
	p := parsePage(t, r)
	for _, n := range p.all(func(*html.Node) bool { return true }) {
		switch n.DataAtom {
		case atom.Img, atom.B:
			t.Errorf("report text made a <%s>", n.Data)
		case atom.Script:
			if strings.Contains(text(n), "alert") {
				t.Errorf("report text reached the script")
			}
		}
		for _, a := range n.Attr {
			if strings.HasPrefix(a.Key, "on") {
				t.Errorf("report text made an attribute %s", a.Key)
			}
		}
	}
	if n := len(p.all(func(n *html.Node) bool { return n.DataAtom == atom.Script })); n != 1 {
		t.Errorf("%d scripts, want 1", n)
	}
	if strings.Contains(p.raw, "\x1b") || strings.Contains(p.raw, "\u202e") {
		t.Errorf("control characters reached the page")
	}
	if got := text(p.byID("cluster")); !strings.Contains(got, `<img src=x onerror=alert(2)>`) || !strings.Contains(got, `\x1b[31m\u202e`) {
		t.Errorf("the cluster name is not shown as escaped text: %q", got)
	}
	cells := p.all(func(n *html.Node) bool { return hasClass(n, "cell") })
	if len(cells) != 1 {
		t.Fatalf("%d cells, want 1", len(cells))
	}
	if v, _ := attr(cells[0], "data-machine"); v != `cp-1"><b>` {
		t.Errorf("data-machine %q", v)
	}
}

// Like the other renderers, the page does not reorder the report it is
// given and renders an unfinished report as its finished self.
func TestHTMLDoesNotMutate(t *testing.T) {
	r := drift.NewReport(fixtureHeader(true))
	r.Add(fixtureResults()...)
	before := slices.Clone(r.Results)
	var a, b bytes.Buffer
	if err := drift.WriteHTML(&a, r); err != nil {
		t.Fatal(err)
	}
	if !slices.EqualFunc(r.Results, before, func(x, y drift.Result) bool { return fmt.Sprint(x) == fmt.Sprint(y) }) {
		t.Errorf("WriteHTML reordered the report's results")
	}
	if err := drift.Render(&b, drift.FormatHTML, fixtureReport(true), drift.TableOptions{}); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Errorf("an unfinished report renders differently from a finished one")
	}
}
