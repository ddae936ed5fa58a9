// Package termsafe keeps text from the outside (machines, snapshots, lock
// files, inventories) from acting on the terminal that shows devata's
// output: a Writer escapes every control character but newline and tab,
// bidirectional overrides and invalid UTF-8, and lets through only SGR
// sequences (ESC [ digits ; m: colours), which devata's own table writes.
// So a member name carrying an OSC title sequence, a cursor move or a
// carriage return that fakes a line shows as \x1b… instead. It imports
// nothing of devata's.
package termsafe

import (
	"fmt"
	"io"
	"os"
	"unicode"
	"unicode/utf8"
)

// Writer escapes what would act on a terminal before it reaches w.
type Writer struct {
	w io.Writer
	// pending is the tail of a write that may be the start of a rune or a
	// sequence the next write completes.
	pending []byte
}

// New wraps w.
func New(w io.Writer) *Writer { return &Writer{w: w} }

// FileOf is the file w writes to, through a Writer or not: a terminal is
// told by its file.
func FileOf(w io.Writer) (*os.File, bool) {
	if t, ok := w.(*Writer); ok {
		w = t.w
	}
	f, ok := w.(*os.File)
	return f, ok
}

// Write escapes p (with what an earlier write left pending) and writes it.
// It reports all of p written when w took what it was given.
func (t *Writer) Write(p []byte) (int, error) {
	data := p
	if len(t.pending) > 0 {
		data = append(t.pending, p...)
	}
	out, rest := escape(data, false)
	t.pending = append([]byte(nil), rest...)
	if _, err := t.w.Write(out); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes what is pending, escaped as it is.
func (t *Writer) Flush() error {
	if len(t.pending) == 0 {
		return nil
	}
	out, _ := escape(t.pending, true)
	t.pending = t.pending[:0]
	_, err := t.w.Write(out)
	return err
}

// escape returns data made safe, and, unless final, the tail that may be
// an unfinished rune or SGR sequence, held for the next write.
func escape(data []byte, final bool) (out, rest []byte) {
	out = make([]byte, 0, len(data))
	for i := 0; i < len(data); {
		c := data[i]
		if c == 0x1b {
			n, complete := sgr(data[i:])
			switch {
			case complete:
				out = append(out, data[i:i+n]...)
				i += n
				continue
			case n == len(data)-i && !final:
				return out, data[i:] // may be completed by the next write
			}
		}
		r, size := utf8.DecodeRune(data[i:])
		if r == utf8.RuneError && size <= 1 {
			if !final && !utf8.FullRune(data[i:]) {
				return out, data[i:]
			}
			out = fmt.Appendf(out, `\x%02x`, c)
			i++
			continue
		}
		switch {
		case r == '\n' || r == '\t':
			out = append(out, byte(r))
		case unicode.IsControl(r) && r < 0x100:
			out = fmt.Appendf(out, `\x%02x`, r)
		case unicode.IsControl(r) || unicode.Is(unicode.Bidi_Control, r):
			out = fmt.Appendf(out, `\u%04x`, r)
		default:
			out = append(out, data[i:i+size]...)
		}
		i += size
	}
	return out, nil
}

// sgr reads an SGR sequence at the start of b (ESC [ then digits and
// semicolons, then m): its length and whether it is one; n == len(b) and
// !complete when b ends before it could tell.
func sgr(b []byte) (n int, complete bool) {
	if len(b) < 2 {
		return len(b), false
	}
	if b[1] != '[' {
		return 0, false
	}
	for i := 2; i < len(b); i++ {
		switch c := b[i]; {
		case c == 'm':
			return i + 1, true
		case c >= '0' && c <= '9' || c == ';':
			if i-2 > 32 {
				return 0, false // no colour is that long
			}
		default:
			return 0, false
		}
	}
	return len(b), false
}
