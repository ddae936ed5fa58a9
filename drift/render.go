package drift

import (
	"fmt"
	"io"
	"strings"
)

// Format names an output format of `devata drift -o`.
type Format string

const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
	FormatYAML  Format = "yaml"
	FormatJUnit Format = "junit"
	FormatProm  Format = "prom"
	FormatHTML  Format = "html"
)

// Formats lists the output formats in the order help texts show them.
func Formats() []Format {
	return []Format{FormatTable, FormatJSON, FormatYAML, FormatJUnit, FormatProm, FormatHTML}
}

// ParseFormat checks a -o value.
func ParseFormat(s string) (Format, error) {
	for _, f := range Formats() {
		if Format(s) == f {
			return f, nil
		}
	}
	names := make([]string, 0, len(Formats()))
	for _, f := range Formats() {
		names = append(names, string(f))
	}
	return "", fmt.Errorf("unknown output format %q: use one of %s", s, strings.Join(names, ", "))
}

// Render writes the report in format f; opts apply to the table only.
func Render(w io.Writer, f Format, r *Report, opts TableOptions) error {
	switch f {
	case FormatTable:
		return WriteTable(w, r, opts)
	case FormatJSON:
		return WriteJSON(w, r)
	case FormatYAML:
		return WriteYAML(w, r)
	case FormatJUnit:
		return WriteJUnit(w, r)
	case FormatProm:
		return WritePrometheus(w, r)
	case FormatHTML:
		return WriteHTML(w, r)
	default:
		_, err := ParseFormat(string(f))
		return err
	}
}
