package drift

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/term"

	"devata.dev/devata/internal/termsafe"
)

// TableOptions tune the human table.
type TableOptions struct {
	// Color paints statuses with ANSI colors. Set it only when writing to a
	// terminal (see AutoColor); it is off by default.
	Color bool
	// All lists every machine in the machine table; without it a report of
	// more than SummaryAbove machines lists only those not in sync, and
	// counts the rest.
	All bool
}

// SummaryAbove is the number of machines past which the table lists only
// the machines that are not in sync (TableOptions.All lists them all).
const SummaryAbove = 50

// AutoColor reports whether output to w may be colored: w is a terminal,
// NO_COLOR is unset and TERM is not "dumb". getenv is os.Getenv outside tests.
func AutoColor(w io.Writer, getenv func(string) string) bool {
	f, ok := termsafe.FileOf(w)
	if !ok || getenv("NO_COLOR") != "" || getenv("TERM") == "dumb" {
		return false
	}
	// A character device is not enough: /dev/null is one.
	return term.IsTerminal(int(f.Fd()))
}

const simulatedNotice = "SIMULATED: these results come from devata's simulated fleet, not from real machines."

// WriteTable writes the report for humans: one line per machine (past
// SummaryAbove machines only those not in sync, unless opts.All), then the
// details of every result that is not InSync grouped by machine, results
// that say the same thing (an unreachable machine's) folded into one entry
// naming their checks, then the errors and a summary line. Text observed on
// machines is escaped so that it cannot drive the terminal.
func WriteTable(w io.Writer, r *Report, opts TableOptions) error {
	t := &tableWriter{bw: bufio.NewWriter(w), r: r.finishedView(), opts: opts}
	if t.r.Simulated {
		t.p("%s\n\n", simulatedNotice)
	}
	if line := provenanceLine(t.r); line != "" {
		t.p("%s\n\n", line)
	}
	t.machineTable()
	t.details()
	t.errors()
	t.summary()
	if t.r.Simulated {
		t.p("%s\n", simulatedNotice)
	}
	return t.bw.Flush()
}

// tableWriter holds what WriteTable's steps share: the buffered output, the
// finished report and, in the details, the machine whose header was written last.
type tableWriter struct {
	bw      *bufio.Writer
	r       *Report
	opts    TableOptions
	machine map[string]MachineSummary
	current string
}

// p writes to the buffer; a write error is kept by bufio and returned by Flush.
func (t *tableWriter) p(format string, a ...any) { fmt.Fprintf(t.bw, format, a...) }

// paint colors a status's text when opts.Color asks for it.
func (t *tableWriter) paint(s Status, text string) string {
	if !t.opts.Color {
		return text
	}
	code := map[Status]string{StatusInSync: "32", StatusDrifted: "33"}[s]
	if code == "" {
		code = "31"
	}
	return "\x1b[" + code + "m" + text + "\x1b[0m"
}

// machineTable writes one line per machine, past SummaryAbove machines only
// those not in sync unless opts.All. Columns are padded by hand rather than
// with tabwriter so that color escapes do not count towards a column's width.
func (t *tableWriter) machineTable() {
	rows := [][]string{{"NAME", "ROLE", "ADDRESS", "STATUS", "CHECKS"}}
	summary := !t.opts.All && len(t.r.Machines) > SummaryAbove
	hidden := 0
	for _, m := range t.r.Machines {
		if summary && m.Status == StatusInSync {
			hidden++
			continue
		}
		checks := fmt.Sprintf("%d/%d in sync", m.Counts.InSync, m.Counts.Total())
		if m.Held != "" {
			checks += ", held"
		}
		rows = append(rows, []string{clean(m.Name), clean(m.Role), clean(m.Address), string(m.Status), checks})
	}
	widths := make([]int, len(rows[0]))
	for _, row := range rows {
		for i, cell := range row {
			widths[i] = max(widths[i], utf8.RuneCountInString(cell))
		}
	}
	for n, row := range rows {
		var line strings.Builder
		for i, cell := range row {
			pad := ""
			if i < len(row)-1 {
				pad = strings.Repeat(" ", widths[i]-utf8.RuneCountInString(cell)+2)
			}
			if i == 3 && n > 0 {
				cell = t.paint(Status(cell), cell)
			}
			line.WriteString(cell + pad)
		}
		t.p("%s\n", strings.TrimRight(line.String(), " "))
	}
	if hidden > 0 {
		t.p("(%d more %s in sync; --all lists every machine)\n", hidden, plural(hidden, "machine", "machines"))
	}
}

// details writes every result that is not InSync, and the machines nothing
// was seen of. Results are sorted by machine, so one pass groups them.
func (t *tableWriter) details() {
	t.machine = map[string]MachineSummary{}
	for _, m := range t.r.Machines {
		t.machine[m.Name] = m
	}
	for _, g := range sameSaying(t.r.Results) {
		t.header(g.Machine)
		t.result(g)
	}
	for _, m := range t.r.Machines {
		if m.Counts.Total() == 0 {
			t.header(m.Name)
			t.p("  no check produced a result: nothing was observed\n")
		}
	}
}

// header writes a machine's heading in the details, once per machine.
func (t *tableWriter) header(name string) {
	if name == t.current {
		return
	}
	t.current = name
	m := t.machine[name]
	about := strings.Join(nonEmpty(clean(m.Role), clean(m.Address)), ", ")
	if about != "" {
		about = " (" + about + ")"
	}
	t.p("\n%s%s: %s, %d/%d in sync\n", clean(name), about, t.paint(m.Status, string(m.Status)), m.Counts.InSync, m.Counts.Total())
	if m.Held != "" {
		t.p("  held by the inventory: %s\n", clean(m.Held))
	}
}

// result writes one folded result: its status and failure policy, then its
// fields, changes, diff and evidence.
func (t *tableWriter) result(g saying) {
	res := g.Result
	status := t.paint(res.Status, string(res.Status))
	switch {
	case g.blocks:
		status += ", fail-closed: blocks a rollout"
	case res.Status == StatusUnknown:
		status += ", fail-open: reported, does not block a rollout"
	}
	t.p("  %s: %s\n", g.name(), status)
	t.field("reason", res.Reason)
	t.field("desired", res.Desired)
	t.field("actual", res.Actual)
	// The changes by path come first, one a line: what changed reads
	// at a glance before the diff shows it in context.
	if len(res.Changes) > 0 {
		t.p("    changes:\n")
		for _, c := range res.Changes {
			t.p("      %s\n", clean(c))
		}
	}
	if res.Diff != "" {
		t.p("    diff:\n")
		for line := range strings.Lines(strings.TrimRight(res.Diff, "\n")) {
			t.p("      %s\n", cleanKeepTabs(strings.TrimRight(line, "\r\n")))
		}
	}
	for _, e := range res.Evidence {
		t.field("evidence", e)
	}
	t.field("next", res.Next)
}

// field writes one named field of a result, unless it is empty.
func (t *tableWriter) field(name, value string) {
	if value != "" {
		t.p("    %-9s %s\n", name+":", clean(value))
	}
}

// errors writes the errors that stopped part of the run, one per item with
// its continuation lines indented.
func (t *tableWriter) errors() {
	if len(t.r.Errors) == 0 {
		return
	}
	t.p("\nErrors that stopped part of the run:\n")
	for _, e := range t.r.Errors {
		for i, line := range strings.Split(e, "\n") {
			lead := "  - "
			if i > 0 {
				lead = "    "
			}
			t.p("%s%s\n", lead, cleanKeepTabs(strings.TrimRight(line, "\r")))
		}
	}
}

// summary writes the closing line: the machines by status, the errors, the
// totals and the exit code.
func (t *tableWriter) summary() {
	s := t.r.Summary
	t.p("\n%d in sync, %d drifted, %d unknown", s.Machines.InSync, s.Machines.Drifted, s.Machines.Unknown)
	if len(t.r.Errors) > 0 {
		t.p(", %d %s", len(t.r.Errors), plural(len(t.r.Errors), "error", "errors"))
	}
	t.p(" (%d %s, %d %s) — exit %d\n", s.Machines.Total(), plural(s.Machines.Total(), "machine", "machines"),
		s.Results.Total(), plural(s.Results.Total(), "result", "results"), s.ExitCode)
}

// provenanceLine is "inventory: PATH @ COMMIT (dirty), sha256:HASH", the
// commit and the hash shortened to 12 digits; without Git it says so
// instead of naming a commit. "" when the report has no provenance.
func provenanceLine(r *Report) string { return clean(r.Provenance.Line(r.Inventory)) }

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func nonEmpty(ss ...string) []string {
	var out []string
	for _, s := range ss {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// clean escapes control characters, bidirectional overrides and invalid UTF-8,
// so that a value read from a machine prints as text and nothing else.
func clean(s string) string { return escape(s, false) }

// cleanKeepTabs is clean for diff lines, where tabs are content.
func cleanKeepTabs(s string) string { return escape(s, true) }

func escape(s string, keepTabs bool) string {
	ok := func(r rune) bool {
		return (keepTabs && r == '\t') || !(unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r))
	}
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !ok(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case ok(r):
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
		i += size
	}
	return b.String()
}

// saying is one entry of the table's details: a result, or results of one
// machine that say the same thing (status, reason, desired, actual, diff,
// evidence and next: an unreachable machine's checks), with their checks.
type saying struct {
	Result
	checks []string // the check of each result folded in
	blocks bool     // any of them blocks a rollout
}

// name is "check (rung)" for one result, "a, b, c (3 checks)" for several.
func (g saying) name() string {
	if len(g.checks) == 1 {
		return g.checks[0] + " (" + clean(string(g.Rung)) + ")"
	}
	return strings.Join(g.checks, ", ") + fmt.Sprintf(" (%d checks)", len(g.checks))
}

// sameSaying folds the results that are not InSync, machine by machine
// (results are sorted by machine), into entries, in the order of their
// first result.
func sameSaying(results []Result) []saying {
	var out []saying
	start := 0 // first entry of the current machine
	for _, res := range results {
		if res.Status == StatusInSync {
			continue
		}
		if len(out) > 0 && out[len(out)-1].Machine != res.Machine {
			start = len(out)
		}
		label := clean(res.Check)
		folded := false
		for i := start; i < len(out); i++ {
			if saysTheSame(out[i].Result, res) {
				out[i].checks = append(out[i].checks, label)
				folded = true
				break
			}
		}
		if !folded {
			out = append(out, saying{Result: res, checks: []string{label}, blocks: res.Blocks()})
		}
	}
	return out
}

// saysTheSame folds results that read the same, and only those of the same
// failure policy: a fold names its policy once, so fail-open checks filed
// with fail-closed ones would be reported as blocking (issue 33).
func saysTheSame(a, b Result) bool {
	return a.Status == b.Status && a.Blocks() == b.Blocks() && a.Reason == b.Reason && a.Desired == b.Desired && a.Actual == b.Actual &&
		a.Diff == b.Diff && slices.Equal(a.Changes, b.Changes) && a.Next == b.Next && slices.Equal(a.Evidence, b.Evidence)
}
