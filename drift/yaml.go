package drift

import (
	"fmt"
	"io"

	"sigs.k8s.io/yaml"
)

// WriteYAML writes the finished report as YAML: the JSON document
// (docs/report.md) with the same fields, converted the way kubectl -o yaml
// is (keys in alphabetical order, multi-line diffs as block scalars).
func WriteYAML(w io.Writer, r *Report) error {
	b, err := marshal(r.finishedView(), "")
	if err != nil {
		return fmt.Errorf("encode report: %w", err)
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return fmt.Errorf("encode report as YAML: %w", err)
	}
	_, err = w.Write(y)
	return err
}
