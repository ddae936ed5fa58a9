package drift

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"devata.dev/devata/provenance"
)

const (
	// APIVersion and Kind identify a serialized report.
	APIVersion = "devata.dev/v1alpha1"
	Kind       = "DriftReport"
)

// Exit codes of `devata drift` (DESIGN.md's CLI contract).
const (
	ExitInSync  = 0 // every machine observed and in sync
	ExitDrifted = 1 // something drifted, and everything was observed
	ExitUnknown = 2 // something could not be observed, or the run could not complete
)

// Machine names a machine a run covers, as the inventory declares it.
type Machine struct {
	Name    string `json:"name"`
	Role    string `json:"role,omitempty"`
	Address string `json:"address,omitempty"`
	// Held is why the inventory holds the machine (machines[].hold):
	// apply, upgrade and reconcile observe it and leave it alone.
	Held string `json:"held,omitempty"`
}

// Counts counts results or machines by status.
type Counts struct {
	InSync  int `json:"inSync"`
	Drifted int `json:"drifted"`
	Unknown int `json:"unknown"`
}

// Total is the sum of the three counts.
func (c Counts) Total() int { return c.InSync + c.Drifted + c.Unknown }

func (c *Counts) add(s Status) {
	switch s {
	case StatusInSync:
		c.InSync++
	case StatusDrifted:
		c.Drifted++
	default:
		c.Unknown++
	}
}

// MachineSummary is one machine's line of a report.
type MachineSummary struct {
	Machine
	// Status is the worst status of the machine's results (Unknown > Drifted >
	// InSync); a machine without any result is Unknown: nothing was seen.
	Status Status `json:"status"`
	// Counts counts the machine's results by status.
	Counts Counts `json:"counts"`
}

// Summary closes a report: how many machines and results have each status and
// the exit code.
type Summary struct {
	Machines Counts `json:"machines"`
	Results  Counts `json:"results"`
	ExitCode int    `json:"exitCode"`
}

// Header is what a report knows before any check runs.
type Header struct {
	Cluster   string
	Inventory string // path of the inventory file
	// Provenance is where the inventory came from (provenance.Of); zero
	// leaves it out of every format.
	Provenance provenance.Info
	// Simulated is true when the machines are devata's simulated fleet; every
	// renderer says so visibly.
	Simulated bool
	// GeneratedAt is when the run started; zero means now.
	GeneratedAt time.Time
	// Machines are the machines the run covers. A machine declared here that
	// gets no result is reported as Unknown.
	Machines []Machine
}

// Collector receives results as checks finish: a *Report keeps them in memory,
// a *JSONStream writes them out as they come. Neither is safe for concurrent
// use unless it says so.
type Collector interface {
	Add(results ...Result)
	AddError(err error)
}

var (
	_ Collector = (*Report)(nil)
	_ Collector = (*JSONStream)(nil)
)

// Report is the outcome of one drift run. The JSON field order puts results
// before the machine summaries so that a JSONStream can write the same document
// in one pass without holding the results.
type Report struct {
	APIVersion  string    `json:"apiVersion"`
	Kind        string    `json:"kind"`
	GeneratedAt time.Time `json:"generatedAt"`
	Inventory   string    `json:"inventory,omitempty"`
	// Provenance is the inventory's sha256 and, in Git, its commit and
	// whether the work tree was dirty; absent when not known.
	Provenance provenance.Info `json:"provenance,omitzero"`
	Cluster    string          `json:"cluster"`
	Simulated  bool            `json:"simulated"`
	Results    []Result        `json:"results"`
	// Machines has one summary per machine, declared or seen in a result.
	Machines []MachineSummary `json:"machines"`
	// Errors are fatal problems that stopped part of the run.
	Errors  []string `json:"errors,omitempty"`
	Summary Summary  `json:"summary"`

	finished bool // Results, Machines and Summary are sorted and current
}

// NewReport starts a report for a run.
func NewReport(h Header) *Report {
	r := &Report{
		APIVersion:  APIVersion,
		Kind:        Kind,
		GeneratedAt: runTime(h.GeneratedAt),
		Inventory:   h.Inventory,
		Provenance:  h.Provenance,
		Cluster:     h.Cluster,
		Simulated:   h.Simulated,
		Results:     []Result{},
	}
	for _, m := range h.Machines {
		r.Machines = append(r.Machines, MachineSummary{Machine: m, Status: StatusUnknown})
	}
	return r
}

// runTime is t in UTC without a monotonic reading, or now when t is zero.
func runTime(t time.Time) time.Time {
	if t.IsZero() {
		t = time.Now()
	}
	return t.UTC().Round(0)
}

// Add appends results. Invalid statuses become Unknown.
func (r *Report) Add(results ...Result) {
	for _, res := range results {
		r.Results = append(r.Results, normalize(res))
	}
	r.finished = false
}

// AddError records a fatal problem that stopped part of the run; any error
// makes the exit code 2.
func (r *Report) AddError(err error) {
	if err == nil {
		return
	}
	r.Errors = append(r.Errors, strings.TrimSpace(err.Error()))
	r.finished = false
}

// Finish sorts the results (machine, rung order, check, then every other field,
// so equal inputs in any order give equal reports), recomputes the machine
// summaries and the summary. It is idempotent, and also completes a report
// decoded from JSON. Renderers finish a copy themselves when needed.
func (r *Report) Finish() {
	if r.APIVersion == "" {
		r.APIVersion = APIVersion
	}
	if r.Kind == "" {
		r.Kind = Kind
	}
	if r.Results == nil {
		r.Results = []Result{}
	}
	for i := range r.Results {
		r.Results[i] = normalize(r.Results[i])
	}
	slices.SortStableFunc(r.Results, compareResults)

	t := newTally()
	for _, m := range r.Machines {
		t.declare(m.Machine)
	}
	for _, res := range r.Results {
		t.add(res)
	}
	r.Machines = t.machines()
	r.Summary = t.summary(len(r.Errors))
	r.finished = true
}

// ExitCode is the exit code of `devata drift` for the report: 0 when every
// machine is in sync, 1 when some drifted and everything was observed, 2 when
// something is Unknown, an error stopped part of the run, or nothing was
// observed at all.
func (r *Report) ExitCode() int {
	return r.finishedView().Summary.ExitCode
}

// Blocking returns the results that block a rollout: the Unknown results of
// fail-closed checks, in report order.
func (r *Report) Blocking() []Result {
	var out []Result
	for _, res := range r.finishedView().Results {
		if res.Blocks() {
			out = append(out, res)
		}
	}
	return out
}

// finishedView is r when it is finished, else a finished copy: renderers must
// not reorder a report behind its owner's back.
func (r *Report) finishedView() *Report {
	if r.finished {
		return r
	}
	c := *r
	c.Results = slices.Clone(r.Results)
	c.Machines = slices.Clone(r.Machines)
	c.Finish()
	return &c
}

// exitCode derives the exit code from machine counts and the number of errors.
func exitCode(machines Counts, errs int) int {
	switch {
	case errs > 0, machines.Unknown > 0, machines.Total() == 0:
		return ExitUnknown
	case machines.Drifted > 0:
		return ExitDrifted
	default:
		return ExitInSync
	}
}

// tally builds machine summaries from results as they arrive; the report and
// the stream share it so both give the same summaries. It holds one entry per
// machine, never the results.
type tally struct {
	byName  map[string]*MachineSummary
	results Counts
}

func newTally() *tally { return &tally{byName: map[string]*MachineSummary{}} }

func (t *tally) entry(name string) *MachineSummary {
	m, ok := t.byName[name]
	if !ok {
		m = &MachineSummary{Machine: Machine{Name: name}}
		t.byName[name] = m
	}
	return m
}

// declare records a machine; a later declaration fills what an earlier one left empty.
func (t *tally) declare(m Machine) {
	e := t.entry(m.Name)
	if m.Role != "" {
		e.Role = m.Role
	}
	if m.Address != "" {
		e.Address = m.Address
	}
	if m.Held != "" {
		e.Held = m.Held
	}
}

func (t *tally) add(r Result) {
	e := t.entry(r.Machine)
	e.Counts.add(r.Status)
	t.results.add(r.Status)
}

// machines returns the summaries sorted by machine name.
func (t *tally) machines() []MachineSummary {
	out := make([]MachineSummary, 0, len(t.byName))
	for _, m := range t.byName {
		s := *m
		switch {
		case s.Counts.Total() == 0, s.Counts.Unknown > 0:
			s.Status = StatusUnknown
		case s.Counts.Drifted > 0:
			s.Status = StatusDrifted
		default:
			s.Status = StatusInSync
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b MachineSummary) int { return compareNames(a.Name, b.Name) })
	return out
}

func (t *tally) summary(errs int) Summary {
	s := Summary{Results: t.results}
	for _, m := range t.machines() {
		s.Machines.add(m.Status)
	}
	s.ExitCode = exitCode(s.Machines, errs)
	return s
}

// compareResults orders results by machine, rung order and check, then by every
// other field so that the order never depends on the order results arrived in.
func compareResults(a, b Result) int {
	return cmp.Or(
		compareNames(a.Machine, b.Machine),
		cmp.Compare(a.Rung.order(), b.Rung.order()),
		strings.Compare(string(a.Rung), string(b.Rung)),
		strings.Compare(a.Check, b.Check),
		cmp.Compare(a.Status.severity(), b.Status.severity()),
		strings.Compare(a.Reason, b.Reason),
		strings.Compare(a.Desired, b.Desired),
		strings.Compare(a.Actual, b.Actual),
		strings.Compare(a.Diff, b.Diff),
		slices.Compare(a.Changes, b.Changes),
		slices.Compare(a.Evidence, b.Evidence),
		strings.Compare(a.Next, b.Next),
		compareBool(a.FailClosed, b.FailClosed),
	)
}

func compareBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	default:
		return 1
	}
}

// compareNames orders machine names naturally, so that worker-2 comes before
// worker-10, falling back to byte order to stay total.
func compareNames(a, b string) int {
	x, y := a, b
	for x != "" && y != "" {
		if isDigit(x[0]) && isDigit(y[0]) {
			dx, dy := digitRun(x), digitRun(y)
			nx, ny := strings.TrimLeft(x[:dx], "0"), strings.TrimLeft(y[:dy], "0")
			if c := cmp.Or(cmp.Compare(len(nx), len(ny)), strings.Compare(nx, ny)); c != 0 {
				return c
			}
			x, y = x[dx:], y[dy:]
			continue
		}
		if c := cmp.Compare(x[0], y[0]); c != 0 {
			return c
		}
		x, y = x[1:], y[1:]
	}
	return cmp.Or(cmp.Compare(len(x), len(y)), strings.Compare(a, b))
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

func digitRun(s string) int {
	i := 0
	for i < len(s) && isDigit(s[i]) {
		i++
	}
	return i
}
