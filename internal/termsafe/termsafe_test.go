package termsafe_test

import (
	"bytes"
	"strings"
	"testing"

	"devata.dev/devata/internal/termsafe"
)

// Probe 8 of issue 31: member names from a snapshot and the lock holder's
// host were printed raw (ESC, OSC title sequences, a fake second line).
// Everything that acts on a terminal is escaped, whatever the chunks it
// comes in; devata's own colours (SGR) pass; text stays text.
func TestWriterEscapesWhatActsOnATerminal(t *testing.T) {
	in := "cp-1\x1b]0;pwned\x07 \x1b[2J\rfake line\u202eevil\xff ok\n\x1b[31mred\x1b[0m\tä\n"
	want := `cp-1\x1b]0;pwned\x07 \x1b[2J\x0dfake line\u202eevil\xff ok` + "\n\x1b[31mred\x1b[0m\tä\n"
	for _, chunk := range []int{1, 2, 3, 5, len(in)} {
		var out bytes.Buffer
		w := termsafe.New(&out)
		for p := []byte(in); len(p) > 0; p = p[min(chunk, len(p)):] {
			if n, err := w.Write(p[:min(chunk, len(p))]); err != nil || n != min(chunk, len(p)) {
				t.Fatalf("write: %d, %v", n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if out.String() != want {
			t.Errorf("chunks of %d:\n got %q\nwant %q", chunk, out.String(), want)
		}
	}
	// what a write leaves pending is flushed, escaped
	var out bytes.Buffer
	w := termsafe.New(&out)
	w.Write([]byte("end\x1b[3")) //nolint:errcheck // a buffer
	w.Flush()                    //nolint:errcheck // idem
	if got := out.String(); got != `end\x1b[3` || strings.ContainsRune(got, 0x1b) {
		t.Errorf("flushed %q", got)
	}
}
