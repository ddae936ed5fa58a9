package drift_test

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"sync"
	"testing"

	"devata.dev/devata/drift"
)

func TestJSONRoundTrip(t *testing.T) {
	want := fixtureReport(true)
	want.Add(drift.Drifted("kubelet version differs", "<v1.34.1>", "v1.34.0 & older").Of("cp-1", "kubelet", drift.RungResources))
	want.AddError(errors.New("kubernetes: list nodes: forbidden"))
	want.Finish()
	out := render(t, drift.WriteJSON, want)
	got := decodeReport(t, out)
	got.Finish()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("decoded report differs:\ngot  %+v\nwant %+v", got, want)
	}
	if again := render(t, drift.WriteJSON, got); !bytes.Equal(again, out) {
		t.Errorf("re-encoding a decoded report changes its bytes")
	}
	for _, want := range []string{`"exitCode": 2`, `"desired": "<v1.34.1>"`, `"actual": "v1.34.0 & older"`} {
		if !bytes.Contains(out, []byte(want)) {
			t.Errorf("JSON lacks %s:\n%s", want, out)
		}
	}
}

func TestJSONStream(t *testing.T) {
	errs := []error{errors.New("kubernetes: list nodes: forbidden")}
	tests := []struct {
		name    string
		results func() []drift.Result
		shuffle bool
		errs    []error
	}{
		{"sorted", func() []drift.Result { return fixtureReport(true).Results }, false, nil},
		{"sorted with errors", func() []drift.Result { return fixtureReport(true).Results }, false, errs},
		{"shuffled", fixtureResults, true, errs},
		{"no results", func() []drift.Result { return nil }, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			results := tt.results()
			if tt.shuffle {
				rand.New(rand.NewPCG(3, 4)).Shuffle(len(results), func(a, b int) { results[a], results[b] = results[b], results[a] })
			}
			want := drift.NewReport(fixtureHeader(true))
			want.Add(results...)
			for _, err := range tt.errs {
				want.AddError(err)
			}
			want.Finish()

			var buf bytes.Buffer
			s := drift.NewJSONStream(&buf)
			if err := s.Begin(fixtureHeader(true)); err != nil {
				t.Fatal(err)
			}
			for _, res := range results { // one by one, as checks finish
				s.Add(res)
			}
			for _, err := range tt.errs {
				s.AddError(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.ExitCode() != want.ExitCode() {
				t.Errorf("stream exit code %d, report %d", s.ExitCode(), want.ExitCode())
			}

			got := decodeReport(t, buf.Bytes())
			if !tt.shuffle {
				// Results arrived in canonical order: the very same bytes.
				if wantJSON := render(t, drift.WriteJSON, want); !bytes.Equal(buf.Bytes(), wantJSON) {
					t.Errorf("stream differs from WriteJSON:\n%s\nwant\n%s", buf.Bytes(), wantJSON)
				}
			} else if reflect.DeepEqual(got.Results, want.Results) {
				t.Fatalf("shuffled results came out sorted; the test proves nothing")
			}
			got.Finish()
			if !reflect.DeepEqual(got, want) {
				t.Errorf("stream decodes to a different report:\ngot  %+v\nwant %+v", got, want)
			}
		})
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n--; w.n < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

func TestJSONStreamErrors(t *testing.T) {
	s := drift.NewJSONStream(&failingWriter{n: 1})
	if err := s.Begin(fixtureHeader(false)); err != nil {
		t.Fatal(err)
	}
	s.Add(fixtureResults()...) // fails: the error sticks
	if err := s.Close(); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Errorf("Close = %v, want the write error", err)
	}

	s = drift.NewJSONStream(io.Discard)
	s.Add(fixtureResults()...)
	if err := s.Close(); err == nil {
		t.Errorf("Add and Close before Begin succeeded")
	}
}

// Checks finish on many goroutines; the stream takes their results as they come.
func TestJSONStreamConcurrent(t *testing.T) {
	machines, results := fleetResults(50)
	var buf bytes.Buffer
	s := drift.NewJSONStream(&buf)
	if err := s.Begin(drift.Header{Cluster: "c", GeneratedAt: fixtureTime, Machines: machines}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := i; j < len(results); j += 8 {
				s.Add(results[j])
			}
		})
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	got := decodeReport(t, buf.Bytes())
	got.Finish()
	want := drift.NewReport(drift.Header{Cluster: "c", GeneratedAt: fixtureTime, Machines: machines})
	want.Add(results...)
	want.Finish()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("concurrently streamed report differs: %d results, want %d", len(got.Results), len(want.Results))
	}
}
