package drift

import (
	"errors"
	"slices"
	"strings"
)

// Findings gathers what one check found on one machine, fact by fact: any
// problem makes its Result Drifted; otherwise anything that could not be read
// makes it Unknown; else InSync. Each problem and unread fact carries the
// next step; the Result names each distinct one once, in order.
type Findings struct {
	problems, unknowns []finding // an unknown's reason is its error's text
	evidence           []string
}

type finding struct{ reason, next string }

// Problem records an observed disagreement with the inventory and the next
// thing to run or inspect.
func (f *Findings) Problem(reason, next string) {
	f.problems = append(f.problems, finding{reason, next})
}

// Unknown records a fact that could not be read, and what to look at.
func (f *Findings) Unknown(err error, next string) {
	f.unknowns = append(f.unknowns, finding{err.Error(), next})
}

// Saw records evidence: what was read.
func (f *Findings) Saw(evidence ...string) { f.evidence = append(f.evidence, evidence...) }

// HasProblems reports whether any problem was recorded.
func (f *Findings) HasProblems() bool { return len(f.problems) > 0 }

// Problems is the problems on one line, in the order found: for a result
// that words its reason around them.
func (f *Findings) Problems() string {
	rs := make([]string, 0, len(f.problems))
	for _, p := range f.problems {
		rs = append(rs, p.reason)
	}
	return strings.Join(rs, "; ")
}

// FirstNext is the next step of the first problem that has one: for a
// result that names only the first thing to do (the storage checks).
func (f *Findings) FirstNext() string {
	for _, p := range f.problems {
		if p.next != "" {
			return p.next
		}
	}
	return ""
}

// Result folds the findings into one result. desired says what the inventory
// wants; actual what was found, the first problem when empty.
func (f *Findings) Result(desired, actual string) Result {
	join := func(fs []finding) (reasons, nexts string) {
		var rs, ns []string
		for _, p := range fs {
			rs = append(rs, p.reason)
			if p.next != "" && !slices.Contains(ns, p.next) {
				ns = append(ns, p.next)
			}
		}
		return strings.Join(rs, "; "), strings.Join(ns, "; ")
	}
	switch {
	case len(f.problems) > 0:
		reasons, nexts := join(f.problems)
		if actual == "" {
			actual = f.problems[0].reason
		}
		return Drifted(reasons, desired, actual).WithEvidence(f.evidence...).WithNext(nexts)
	case len(f.unknowns) > 0:
		reasons, nexts := join(f.unknowns)
		return Unknown(errors.New(reasons), nexts).WithEvidence(f.evidence...)
	}
	return InSync(f.evidence...)
}
