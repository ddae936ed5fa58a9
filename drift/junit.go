package drift

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"devata.dev/devata/provenance"
)

// The JUnit XML shape that Jenkins (junit plugin) and GitLab read: testsuites >
// testsuite > testcase, with failure for Drifted and error for Unknown. One
// testsuite per machine, because a machine is what an operator fixes, and the
// table groups the same way; one testcase per result, named after its check.
type junitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Time     string       `xml:"time,attr"`
	Suites   []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       string          `xml:"time,attr"`
	Timestamp  string          `xml:"timestamp,attr"`
	Hostname   string          `xml:"hostname,attr,omitempty"`
	Properties []junitProperty `xml:"properties>property,omitempty"`
	Cases      []junitCase     `xml:"testcase"`
}

type junitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      string        `xml:"time,attr"`
	Failure   *junitProblem `xml:"failure,omitempty"`
	Error     *junitProblem `xml:"error,omitempty"`
	SystemOut *junitText    `xml:"system-out,omitempty"`
}

// junitText is a multi-line body, written as CDATA so that diffs stay readable.
type junitText struct {
	Text string `xml:",cdata"`
}

type junitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",cdata"`
}

// junitTime is every time attribute: checks are not timed one by one, and both
// CI systems require the attribute.
const junitTime = "0.000"

// WriteJUnit writes the report as JUnit XML: one testsuite per machine, one
// testcase per result (classname = machine, name = check); Drifted is a
// <failure>, Unknown an <error>. A machine without results gets one erroring
// testcase "observe", and errors that stopped the run go into a testsuite
// "devata". A simulated report says so in every suite's name and properties.
func WriteJUnit(w io.Writer, r *Report) error {
	r = r.finishedView()
	sim := ""
	if r.Simulated {
		sim = " (simulated)"
	}
	props := []junitProperty{
		{Name: "cluster", Value: r.Cluster},
		{Name: "inventory", Value: r.Inventory},
		{Name: "simulated", Value: fmt.Sprint(r.Simulated)},
	}
	props = append(props, provenanceProperties(r.Provenance)...)
	stamp := r.GeneratedAt.UTC().Format(time.RFC3339)
	doc := junitSuites{Name: "devata drift " + r.Cluster + sim, Time: junitTime}

	byMachine := map[string][]Result{}
	for _, res := range r.Results {
		byMachine[res.Machine] = append(byMachine[res.Machine], res)
	}
	for _, m := range r.Machines {
		suite := junitSuite{
			Name: m.Name + sim, Time: junitTime, Timestamp: stamp, Hostname: m.Address,
			Properties: append(props[:len(props):len(props)], junitProperty{Name: "role", Value: m.Role}),
		}
		for _, res := range byMachine[m.Name] {
			suite.Cases = append(suite.Cases, junitResult(res))
		}
		if len(suite.Cases) == 0 {
			suite.Cases = append(suite.Cases, junitCase{
				Name: "observe", Classname: m.Name, Time: junitTime,
				Error: &junitProblem{Type: string(StatusUnknown), Message: "no check produced a result: nothing was observed"},
			})
		}
		doc.Suites = append(doc.Suites, suite)
	}
	if len(r.Errors) > 0 {
		suite := junitSuite{Name: "devata" + sim, Time: junitTime, Timestamp: stamp, Properties: props}
		for i, e := range r.Errors {
			suite.Cases = append(suite.Cases, junitCase{
				Name: fmt.Sprintf("error %d", i+1), Classname: "devata", Time: junitTime,
				Error: &junitProblem{Type: "Error", Message: oneLine(e), Text: xmlText(e)},
			})
		}
		doc.Suites = append(doc.Suites, suite)
	}
	for i := range doc.Suites {
		s := &doc.Suites[i]
		for _, c := range s.Cases {
			s.Tests++
			if c.Failure != nil {
				s.Failures++
			}
			if c.Error != nil {
				s.Errors++
			}
		}
		doc.Tests += s.Tests
		doc.Failures += s.Failures
		doc.Errors += s.Errors
	}

	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(doc); err != nil {
		return fmt.Errorf("encode junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

// provenanceProperties are the provenance's fields named by their JSON
// path (provenance.commit, …), each only when the JSON has it, except that
// provenance.dirty is there whenever a commit is: a property for CI to read.
func provenanceProperties(pv provenance.Info) []junitProperty {
	var out []junitProperty
	add := func(name, value string) {
		if value != "" {
			out = append(out, junitProperty{Name: "provenance." + name, Value: value})
		}
	}
	add("commit", pv.Commit)
	if pv.InGit() {
		add("dirty", fmt.Sprint(pv.Dirty))
	}
	add("repoPath", pv.RepoPath)
	add("inventorySha256", pv.InventorySHA256)
	return out
}

func junitResult(res Result) junitCase {
	c := junitCase{Name: res.Check, Classname: res.Machine, Time: junitTime}
	var body strings.Builder
	line := func(name, value string) {
		if value != "" {
			fmt.Fprintf(&body, "%s: %s\n", name, value)
		}
	}
	line("rung", string(res.Rung))
	line("status", string(res.Status))
	line("reason", res.Reason)
	line("desired", res.Desired)
	line("actual", res.Actual)
	for _, e := range res.Evidence {
		line("evidence", e)
	}
	line("next", res.Next)
	if res.FailClosed {
		line("failClosed", "true")
	}
	if len(res.Changes) > 0 {
		body.WriteString("changes:\n")
		for _, c := range res.Changes {
			body.WriteString("  " + c + "\n")
		}
	}
	if res.Diff != "" {
		body.WriteString("diff:\n" + strings.TrimRight(res.Diff, "\n") + "\n")
	}
	text := xmlText(body.String())
	problem := &junitProblem{Type: string(res.Status), Message: res.Reason, Text: text}
	switch res.Status {
	case StatusInSync:
		c.SystemOut = &junitText{Text: text}
	case StatusDrifted:
		c.Failure = problem
	default:
		c.Error = problem
	}
	return c
}

// xmlText replaces what XML 1.0 cannot carry (most control characters, invalid
// UTF-8) with U+FFFD. encoding/xml does so for attributes and escaped text but
// writes CDATA as it is.
func xmlText(s string) string {
	valid := func(r rune) bool {
		return r == '\t' || r == '\n' || r == '\r' ||
			(r >= 0x20 && r <= 0xD7FF) || (r >= 0xE000 && r <= 0xFFFD) || (r >= 0x10000 && r <= 0x10FFFF)
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || !valid(r) {
			return '\uFFFD'
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
}
