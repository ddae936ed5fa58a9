package drift

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"devata.dev/devata/provenance"
)

// WriteJSON writes the finished report as indented JSON (docs/report.md). The
// encoding is deterministic: the same report gives the same bytes.
func WriteJSON(w io.Writer, r *Report) error {
	b, err := marshal(r.finishedView(), "")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// marshal encodes v indented by two spaces per level after prefix, without
// escaping <, > and & (diffs are full of them) and without a trailing newline.
func marshal(v any, prefix string) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent(prefix, "  ")
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// JSONStream writes a report as results arrive, so a fleet of any size never
// has to be held in memory: only one summary per machine is kept. It writes the
// same document as WriteJSON, except that results stay in the order they were
// added (Finish on the decoded report restores the canonical order). It is safe
// for concurrent use; the first write error sticks and Close returns it.
type JSONStream struct {
	mu      sync.Mutex
	w       io.Writer
	tally   *tally
	errs    []string
	n       int // results written
	begun   bool
	closed  bool
	err     error
	summary Summary
}

// NewJSONStream returns a stream writing to w; call Begin, Add and Close.
func NewJSONStream(w io.Writer) *JSONStream {
	return &JSONStream{w: w, tally: newTally()}
}

// jsonHeader is the part of Report written before the results, in its order.
type jsonHeader struct {
	APIVersion  string          `json:"apiVersion"`
	Kind        string          `json:"kind"`
	GeneratedAt time.Time       `json:"generatedAt"`
	Inventory   string          `json:"inventory,omitempty"`
	Provenance  provenance.Info `json:"provenance,omitzero"`
	Cluster     string          `json:"cluster"`
	Simulated   bool            `json:"simulated"`
}

// Begin writes the header and opens the results.
func (s *JSONStream) Begin(h Header) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.begun {
		s.fail(errors.New("json stream: Begin called twice"))
		return s.err
	}
	s.begun = true
	for _, m := range h.Machines {
		s.tally.declare(m)
	}
	b, err := marshal(jsonHeader{
		APIVersion: APIVersion, Kind: Kind, GeneratedAt: runTime(h.GeneratedAt),
		Inventory: h.Inventory, Provenance: h.Provenance, Cluster: h.Cluster, Simulated: h.Simulated,
	}, "")
	if err != nil {
		s.fail(fmt.Errorf("encode report header: %w", err))
		return s.err
	}
	// Reopen the header object and append the results array to it.
	b = bytes.TrimSuffix(b, []byte("\n}"))
	b = append(b, ",\n  \"results\": ["...)
	s.write(b)
	return s.err
}

// Add writes results. Invalid statuses become Unknown, as in Report.Add.
func (s *JSONStream) Add(results ...Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begun || s.closed {
		s.fail(errors.New("json stream: Add outside Begin and Close"))
		return
	}
	var buf bytes.Buffer
	for _, res := range results {
		res = normalize(res)
		b, err := marshal(res, "    ")
		if err != nil {
			s.fail(fmt.Errorf("encode result: %w", err))
			return
		}
		if s.n > 0 {
			buf.WriteByte(',')
		}
		buf.WriteString("\n    ")
		buf.Write(b)
		s.n++
		s.tally.add(res)
	}
	s.write(buf.Bytes())
}

// AddError records a fatal problem; it is written with the closing summary.
func (s *JSONStream) AddError(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		s.fail(errors.New("json stream: AddError after Close"))
		return
	}
	s.errs = append(s.errs, strings.TrimSpace(err.Error()))
}

// Close writes the machine summaries, the errors and the summary, and returns
// the first error the stream met. It does not close the underlying writer.
func (s *JSONStream) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.begun {
		s.fail(errors.New("json stream: Close before Begin"))
		return s.err
	}
	if s.closed {
		return s.err
	}
	s.closed = true
	s.summary = s.tally.summary(len(s.errs))
	tail := struct {
		Machines []MachineSummary `json:"machines"`
		Errors   []string         `json:"errors,omitempty"`
		Summary  Summary          `json:"summary"`
	}{s.tally.machines(), s.errs, s.summary}
	b, err := marshal(tail, "")
	if err != nil {
		s.fail(fmt.Errorf("encode report summary: %w", err))
		return s.err
	}
	var buf bytes.Buffer
	if s.n > 0 {
		buf.WriteString("\n  ")
	}
	buf.WriteString("],")
	buf.Write(bytes.TrimPrefix(b, []byte("{"))) // continue the report object
	buf.WriteByte('\n')
	s.write(buf.Bytes())
	return s.err
}

// ExitCode is the exit code of the results written so far; after Close it is
// the report's.
func (s *JSONStream) ExitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tally.summary(len(s.errs)).ExitCode
}

// write writes b unless the stream has already failed. A write error is
// recorded, not returned: the stream's first error is sticky, and Begin and
// Close report it (Add and AddError have no error to return).
func (s *JSONStream) write(b []byte) {
	if s.err != nil {
		return
	}
	if _, err := s.w.Write(b); err != nil {
		s.fail(fmt.Errorf("write report: %w", err))
	}
}

// fail records err unless an earlier error was recorded; the first one wins.
func (s *JSONStream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
}
