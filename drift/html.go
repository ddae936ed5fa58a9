package drift

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"slices"
	"strings"
	"time"
)

// The page's stylesheet and script are fixed text, never built from a
// report: report strings reach the page only through html/template's
// escaping, as element text and attribute values. The page's
// Content-Security-Policy allows exactly these two blocks by hash and
// nothing else (no fetches, no other script, no style attributes), so that
// the page is self-contained and text read from a machine cannot run.
var (
	//go:embed html.css
	htmlStyle string
	//go:embed html.js
	htmlScript string

	htmlPage = template.Must(template.New("report").Funcs(template.FuncMap{
		"clean":     clean,
		"diffLines": diffLines,
		"lines":     textLines,
	}).Parse(htmlTemplate))
	htmlCSP = "default-src 'none'; style-src " + cspHash(htmlStyle) + "; script-src " + cspHash(htmlScript) +
		"; img-src 'none'; form-action 'none'; base-uri 'none'"
)

//go:embed html.tmpl
var htmlTemplate string

func cspHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
}

// htmlView is what the template reads.
type htmlView struct {
	R         *Report
	CSP       string
	Style     template.CSS
	Script    template.JS
	Generated string
	Checks    []htmlCheck
	Rows      []htmlRow
	Rungs     []Rung
	Statuses  []htmlStatus
}

// htmlCheck is a column of the grid: a check, with the lowest rung any of
// its results has (columns run up the ladder, as results do).
type htmlCheck struct {
	Name string
	Rung Rung
}

// htmlRow is a machine's row: one slot per column, each holding the
// results of that check on that machine (normally one; none where the check
// does not apply, etcd on a worker).
type htmlRow struct {
	MachineSummary
	Slots [][]htmlCell
}

// htmlCell is one result and the id of its details.
type htmlCell struct {
	Result
	ID     string
	Blocks bool
}

// htmlStatus is a status filter with its count of results.
type htmlStatus struct {
	Status Status
	Count  int
}

// WriteHTML writes the finished report as one self-contained HTML page
// (docs/report.md): a grid of machines × checks, each cell coloured by its
// status and opening its reason, evidence, diff and next step, with filters
// by status and rung. The page fetches nothing and works offline; its
// strings are the report's (already redacted by the checks), escaped by
// html/template, and text read from machines is cleaned as in the table.
func WriteHTML(w io.Writer, r *Report) error {
	r = r.finishedView()
	v := htmlView{
		R:         r,
		CSP:       htmlCSP,
		Style:     template.CSS(htmlStyle), //nolint:gosec // fixed text from html.css, hashed into the CSP
		Script:    template.JS(htmlScript), //nolint:gosec // fixed text from html.js, hashed into the CSP
		Generated: r.GeneratedAt.UTC().Format(time.RFC3339),
	}

	col := map[string]int{}
	for _, res := range r.Results {
		i, ok := col[res.Check]
		if !ok {
			col[res.Check] = len(v.Checks)
			v.Checks = append(v.Checks, htmlCheck{Name: res.Check, Rung: res.Rung})
			continue
		}
		if res.Rung.order() < v.Checks[i].Rung.order() {
			v.Checks[i].Rung = res.Rung
		}
	}
	slices.SortStableFunc(v.Checks, func(a, b htmlCheck) int {
		if c := a.Rung.order() - b.Rung.order(); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	for i, c := range v.Checks {
		col[c.Name] = i
	}

	row := map[string]int{}
	for _, m := range r.Machines {
		row[m.Name] = len(v.Rows)
		v.Rows = append(v.Rows, htmlRow{MachineSummary: m, Slots: make([][]htmlCell, len(v.Checks))})
	}
	counts := map[Status]int{}
	rungs := map[Rung]bool{}
	for i, res := range r.Results {
		// Finish declares every machine a result names, so the row exists.
		slot := &v.Rows[row[res.Machine]].Slots[col[res.Check]]
		*slot = append(*slot, htmlCell{Result: res, ID: fmt.Sprintf("r%d", i), Blocks: res.Blocks()})
		counts[res.Status]++
		rungs[res.Rung] = true
	}
	for _, s := range []Status{StatusInSync, StatusDrifted, StatusUnknown} {
		v.Statuses = append(v.Statuses, htmlStatus{Status: s, Count: counts[s]})
	}
	for _, g := range Rungs() {
		if rungs[g] {
			v.Rungs = append(v.Rungs, g)
			delete(rungs, g)
		}
	}
	var odd []Rung // rungs outside the ladder, from a decoded report
	for g := range rungs {
		odd = append(odd, g)
	}
	slices.Sort(odd)
	v.Rungs = append(v.Rungs, odd...)

	if err := htmlPage.Execute(w, v); err != nil {
		return fmt.Errorf("render HTML report: %w", err)
	}
	return nil
}

// diffLine is one line of a diff with its kind: "add", "del", "hunk",
// "file" or "" for context.
type diffLine struct {
	Kind, Text string
}

func diffLines(diff string) []diffLine {
	var out []diffLine
	for line := range strings.Lines(strings.TrimRight(diff, "\n")) {
		line = strings.TrimRight(line, "\r\n")
		kind := ""
		switch {
		case strings.HasPrefix(line, "+++"), strings.HasPrefix(line, "---"):
			kind = "file"
		case strings.HasPrefix(line, "@@"):
			kind = "hunk"
		case strings.HasPrefix(line, "+"):
			kind = "add"
		case strings.HasPrefix(line, "-"):
			kind = "del"
		}
		out = append(out, diffLine{Kind: kind, Text: cleanKeepTabs(line)})
	}
	return out
}

// textLines splits multi-line text (an error) into cleaned lines.
func textLines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		out = append(out, cleanKeepTabs(strings.TrimRight(line, "\r\n")))
	}
	return out
}
